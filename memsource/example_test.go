package memsource_test

import (
	"context"
	"fmt"

	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/source"
)

// Setting is an object kept in a Source, named by its Name.
type Setting struct {
	Name, Value string
}

// A consumer lists the source, then watches the changes after the list's
// version, as a Reflector does.
func Example() {
	ctx := context.Background()
	src := memsource.New(func(s Setting) (string, error) { return s.Name, nil }, memsource.Options{})
	src.Put(Setting{"color", "blue"})
	src.Put(Setting{"size", "L"})

	list, err := src.List(ctx, source.ListOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Println("listed at", list.ResourceVersion, list.Items)

	w, err := src.Watch(ctx, source.WatchOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		panic(err)
	}
	defer w.Stop()

	src.Put(Setting{"color", "green"})
	src.Delete("size")
	for range 2 {
		ev, err := w.Next(ctx)
		if err != nil {
			panic(err)
		}
		fmt.Println(ev.ResourceVersion, ev.Type, ev.Object)
	}
	// Output:
	// listed at 3 [{color blue} {size L}]
	// 4 updated {color green}
	// 5 deleted {size L}
}

// Every page of a paged list is at the revision of the first, even when the
// source changes between pages.
func ExampleSource_List() {
	ctx := context.Background()
	src := memsource.New(func(s Setting) (string, error) { return s.Name, nil }, memsource.Options{})
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		src.Put(Setting{name, "1"})
	}

	opts := source.ListOptions{Limit: 2}
	for {
		page, err := src.List(ctx, opts)
		if err != nil {
			panic(err)
		}
		fmt.Println(page.ResourceVersion, page.Items)
		if page.Continue == "" {
			break
		}
		opts.Continue = page.Continue
		src.Delete("e") // not seen by this list
	}
	// Output:
	// 6 [{a 1} {b 1}]
	// 6 [{c 1} {d 1}]
	// 6 [{e 1}]
}

// The fault hooks make a Source misbehave the way remote sources do, to test
// how a consumer copes.
func ExampleSource_CutWatches() {
	ctx := context.Background()
	src := memsource.New(func(s Setting) (string, error) { return s.Name, nil }, memsource.Options{})

	w, err := src.Watch(ctx, source.WatchOptions{})
	if err != nil {
		panic(err)
	}
	src.CutWatches() // a dropped connection
	_, err = w.Next(ctx)
	fmt.Println(err)

	src.FailNext(1, fmt.Errorf("no leader: %w", source.ErrUnavailable))
	_, err = src.Watch(ctx, source.WatchOptions{})
	fmt.Println(err)

	src.Put(Setting{"a", "1"})
	src.Put(Setting{"a", "2"})
	src.Compact(3) // history up to revision 3 is gone
	_, err = src.Watch(ctx, source.WatchOptions{ResourceVersion: "2"})
	fmt.Println(err)
	// Output:
	// memsource: watch cut: mirror: source unavailable
	// no leader: mirror: source unavailable
	// memsource: watch from revision 2: compacted up to 3: mirror: resource version expired
}
