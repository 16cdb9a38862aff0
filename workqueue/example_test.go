package workqueue_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/listwatch/mirror/workqueue"
)

// Example is a worker loop: keys from an initial list wait behind live
// changes, a key that fails is retried after its backoff, and the queue
// drains before the program ends.
func Example() {
	q := workqueue.New[string](workqueue.Options{Name: "example"})

	// An initial list queues its keys in the background...
	for _, key := range []string{"a", "b", "c"} {
		q.AddWithPriority(key, workqueue.PriorityBackground)
	}
	// ...and live changes go ahead of them: b is raised, d is new.
	q.Add("b")
	q.Add("d")

	failOnce := map[string]bool{"c": true}
	reconciled := make(chan string)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			key, err := q.Get(context.Background())
			if err != nil {
				return // workqueue.ErrShutdown: drained
			}
			if failOnce[key] {
				delete(failOnce, key)
				fmt.Println("failed", key)
				q.AddRateLimited(key) // before Done, so the retry count is kept
			} else {
				fmt.Println("reconciled", key, "after", q.NumRequeues(key), "retries")
				q.Forget(key)
				reconciled <- key
			}
			q.Done(key)
		}
	})
	for range 4 {
		<-reconciled
	}
	if err := q.ShutDownWithDrain(context.Background()); err != nil {
		fmt.Println(err)
	}
	wg.Wait()
	// Output:
	// reconciled b after 0 retries
	// reconciled d after 0 retries
	// reconciled a after 0 retries
	// failed c
	// reconciled c after 1 retries
}

// ExampleQueue_AddWithPriority shows the order keys are handed out in:
// higher priorities first, and in the order they came within one.
func ExampleQueue_AddWithPriority() {
	q := workqueue.New[string](workqueue.Options{})
	defer q.ShutDown()
	q.AddWithPriority("resync/x", workqueue.PriorityResync)
	q.AddWithPriority("list/y", workqueue.PriorityBackground)
	q.Add("live/z")
	q.AddWithPriority("urgent", workqueue.PriorityLive+1)
	q.AddWithPriority("list/w", workqueue.PriorityBackground)
	for q.Len() > 0 {
		key, _ := q.Get(context.Background())
		fmt.Println(key)
		q.Done(key)
	}
	// Output:
	// urgent
	// live/z
	// list/y
	// list/w
	// resync/x
}
