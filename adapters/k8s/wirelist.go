package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// page is one page of a list, decoded.
type page[T any] struct {
	meta    metav1.ListMeta
	items   []T
	skipped []error
}

// pages reads a paged list's next page while the current one is decoded,
// and reuses a page's buffer for a later page of the same list.
//
// A list of many pages is otherwise strictly in turn: the server encodes a
// page while the client waits, then the client decodes it while the
// server waits. Once a continued page's token for the page after it is
// read, the request for that page is sent, and the page is waiting, or on
// its way, when the caller asks for it. A first page reads nothing ahead:
// a caller after one page (a probe, a consistent read of the version)
// never pays for a second. A read-ahead that is not asked for (the caller
// stopped, or asked for something else) is dropped; one that failed is
// asked for again, so that its error is the request's own.
type pages struct {
	mu    sync.Mutex
	next  *readAhead
	spare []byte // a decoded page's buffer, for the next; nil after a last page
}

// readAhead is a page being read ahead of its request.
type readAhead struct {
	opts metav1.ListOptions
	done chan struct{} // closed once buf and err are set
	buf  []byte
	err  error
}

// list gets and decodes one page.
func (c *wireClient[T]) list(ctx context.Context, o metav1.ListOptions) (page[T], error) {
	var p page[T]
	raw, err := c.listRaw(ctx, o, false)
	if err != nil {
		return p, err
	}
	p.meta = raw.meta
	// Decoding copies what it keeps out of the page, so its buffer can
	// be reused.
	p.items, p.skipped = c.decodeItems(raw.items, raw.proto, p.meta.ResourceVersion)
	c.recycle(raw.buf, p.meta.Continue != "")
	return p, nil
}

// rawPage is one page of a list, its items undecoded: each one's
// protobuf message or JSON, in buf's memory.
type rawPage struct {
	meta  metav1.ListMeta
	items [][]byte
	proto bool
	buf   []byte // the page as read
}

// listRaw gets one page and splits it into its items, and starts reading
// the next (see pages). With protoOnly, a page the server answered in JSON
// is not split: listRaw fails with an error wrapping ErrNotEncoded.
func (c *wireClient[T]) listRaw(ctx context.Context, o metav1.ListOptions, protoOnly bool) (rawPage, error) {
	var p rawPage
	raw, err := c.pageBytes(ctx, o)
	if err != nil {
		return p, err
	}
	p.buf = raw
	if msg, _, perr := unwrapObject(raw); perr == nil {
		p.proto = true
		err = eachField(msg, func(f protoField) error {
			switch {
			case f.num == 1 && f.wire == 2:
				return p.meta.Unmarshal(f.data)
			case f.num == 2 && f.wire == 2:
				p.items = append(p.items, f.data)
			}
			return nil
		})
		if err != nil {
			return p, fmt.Errorf("decode a list: %w", err)
		}
		c.readAhead(ctx, o, p.meta.Continue)
		return p, nil
	}
	c.servesJSON.Store(true)
	if protoOnly {
		return p, fmt.Errorf("a list of %d bytes, not protobuf: %w", len(raw), ErrNotEncoded)
	}
	var l struct {
		Metadata metav1.ListMeta   `json:"metadata"`
		Items    []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(raw, &l); err != nil {
		return p, fmt.Errorf("decode a list of %d bytes: %w", len(raw), errJSON(err))
	}
	p.meta = l.Metadata
	c.readAhead(ctx, o, p.meta.Continue)
	p.items = make([][]byte, len(l.Items))
	for i, it := range l.Items {
		p.items[i] = it
	}
	return p, nil
}

// pageBytes returns the body of the page o asks for: the one read ahead
// for o, if there is one.
func (c *wireClient[T]) pageBytes(ctx context.Context, o metav1.ListOptions) ([]byte, error) {
	c.pages.mu.Lock()
	ra := c.pages.next
	c.pages.next = nil
	c.pages.mu.Unlock()
	if ra != nil && ra.opts == o {
		select {
		case <-ra.done:
			if ra.err == nil {
				return ra.buf, nil
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return c.readPage(ctx, o)
}

// recycle keeps buf, a decoded page's, for the next page if more are to
// come; after a list's last page nothing is kept.
func (c *wireClient[T]) recycle(buf []byte, more bool) {
	c.pages.mu.Lock()
	defer c.pages.mu.Unlock()
	if more {
		c.pages.spare = buf
	} else {
		c.pages.spare = nil
	}
}

// readAhead starts reading the page after the one o asked for, whose
// continue token is next, if o continued a list and next is not its last
// page. The read ends with ctx.
func (c *wireClient[T]) readAhead(ctx context.Context, o metav1.ListOptions, next string) {
	if o.Continue == "" || next == "" {
		return
	}
	o.Continue = next
	ra := &readAhead{opts: o, done: make(chan struct{})}
	c.pages.mu.Lock()
	c.pages.next = ra
	c.pages.mu.Unlock()
	go func() {
		defer close(ra.done)
		ra.buf, ra.err = c.readPage(ctx, o)
	}()
}

// readPage requests the page o asks for and reads its body, into the
// spare buffer if there is one.
func (c *wireClient[T]) readPage(ctx context.Context, o metav1.ListOptions) ([]byte, error) {
	body, err := c.request(o).Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	c.pages.mu.Lock()
	b := c.pages.spare[:0]
	c.pages.spare = nil
	c.pages.mu.Unlock()
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
	}
}
