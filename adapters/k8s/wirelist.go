package k8s

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
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
	// cancel ends the read's request: a read-ahead dropped unasked for
	// must not go on reading (or waiting for) a page nobody will take.
	cancel context.CancelFunc
	done   chan struct{} // closed once buf and err are set
	buf    []byte
	err    error
}

// list gets and decodes one page. A protobuf page is decoded as it is
// read, a chunk of items at a time, so that a page of any size (a list
// the server serves whole from its cache) is never held undecoded.
func (c *wireClient[T]) list(ctx context.Context, o metav1.ListOptions) (page[T], error) {
	var p page[T]
	pr, err := c.openPage(ctx, o)
	if err != nil {
		return p, err
	}
	defer pr.close(&p.meta)
	if !pr.proto {
		// JSON, or not a list at all: read whole, as listRaw does.
		raw, err := io.ReadAll(pr.br)
		if err != nil {
			return p, err
		}
		rp, err := c.splitPage(ctx, o, raw, false)
		if err != nil {
			return p, err
		}
		p.meta = rp.meta
		p.items, p.skipped = c.decodeItems(rp.items, 0, rp.proto, p.meta.ResourceVersion)
		return p, nil
	}
	err = c.decodeListStream(ctx, o, pr.reader(), &p.meta, func(items [][]byte, first int) {
		objs, skipped := c.decodeItems(items, first, true, p.meta.ResourceVersion)
		p.items = append(p.items, objs...)
		p.skipped = append(p.skipped, skipped...)
	})
	return p, err
}

// listChunks gets one page, which must be protobuf, and hands its items'
// messages to each a chunk at a time, as they are read, with the place
// of the chunk's first item in the page: a chunk's memory is reused once
// each returns. It returns the page's ListMeta. A page the
// server answered in JSON is not read: listChunks fails with an error
// wrapping ErrNotEncoded.
func (c *wireClient[T]) listChunks(ctx context.Context, o metav1.ListOptions, each func(items [][]byte, first int, rv string)) (metav1.ListMeta, error) {
	var meta metav1.ListMeta
	pr, err := c.openPage(ctx, o)
	if err != nil {
		return meta, err
	}
	defer pr.close(&meta)
	if !pr.proto {
		c.servesJSON.Store(true)
		return meta, fmt.Errorf("a list that is not protobuf: %w", ErrNotEncoded)
	}
	err = c.decodeListStream(ctx, o, pr.reader(), &meta, func(items [][]byte, first int) { each(items, first, meta.ResourceVersion) })
	return meta, err
}

// pageReader is a page being read: the page read ahead for its request,
// or the response's body.
type pageReader struct {
	pages *pages
	br    *bufio.Reader
	proto bool // the page is protobuf; br is past its magic
	buf   []byte
	body  io.Closer
}

// openPage starts reading the page o asks for.
func (c *wireClient[T]) openPage(ctx context.Context, o metav1.ListOptions) (*pageReader, error) {
	pr := &pageReader{pages: &c.pages}
	var err error
	if pr.buf, err = c.readAheadFor(ctx, o); err != nil {
		return nil, err
	}
	var r io.Reader
	if pr.buf != nil {
		r = bytes.NewReader(pr.buf)
	} else {
		body, err := c.request(o).Stream(ctx)
		if err != nil {
			return nil, err
		}
		pr.body, r = body, body
	}
	pr.br = bufio.NewReaderSize(r, 64<<10)
	if head, err := pr.br.Peek(len(protoMagic)); err == nil && bytes.Equal(head, protoMagic) {
		_, _ = pr.br.Discard(len(protoMagic))
		pr.proto = true
	}
	return pr, nil
}

// reader reads the rest of a protobuf page, a runtime.Unknown.
func (pr *pageReader) reader() *protoReader { return &protoReader{br: pr.br, n: -1} }

// close ends the read; a page read ahead leaves its buffer for the next
// page if meta, the page's, says there is one.
func (pr *pageReader) close(meta *metav1.ListMeta) {
	if pr.body != nil {
		_ = pr.body.Close()
	}
	if pr.buf != nil {
		pr.pages.recycle(pr.buf, meta.Continue != "")
	}
}

// Items are decoded a chunk at a time: at least this many bytes of them,
// or this many items.
const (
	chunkBytes = 4 << 20
	chunkItems = 1024
)

// errNoList is the error of a page without its list message, which a
// server always sends: a page cut before it is not an empty list.
var errNoList = fmt.Errorf("decode a list: %w: no list in the page", errProto)

// decodeListStream reads a runtime.Unknown holding a list from r: the
// list's ListMeta into meta, its items' messages to each, a chunk at a
// time (see decodeItemsStream).
func (c *wireClient[T]) decodeListStream(ctx context.Context, o metav1.ListOptions, r *protoReader, meta *metav1.ListMeta, each func(items [][]byte, first int)) error {
	var encoding []byte
	list := false
	for !r.done() {
		num, wire, err := r.tag()
		if err != nil {
			return err
		}
		if num == 2 && wire == 2 { // the list's message
			n, err := r.length()
			if err != nil {
				return err
			}
			if err := c.decodeItemsStream(ctx, o, &protoReader{br: r.br, n: int64(n)}, meta, each); err != nil {
				return err
			}
			r.consumed(int64(n))
			list = true
			continue
		}
		if num == 3 && wire == 2 {
			if encoding, err = r.bytes(nil); err != nil {
				return err
			}
			continue
		}
		if err := r.skip(wire); err != nil {
			return err
		}
	}
	if len(encoding) > 0 {
		return fmt.Errorf("decode a list: %w: content encoding %q", errProto, encoding)
	}
	if !list {
		return errNoList
	}
	return nil
}

// decodeItemsStream reads a list message from r: its ListMeta into meta
// (and then starts reading the next page ahead), its items' messages to
// each, a chunk at a time, in memory reused for the next chunk, with the
// place of the chunk's first item in the list.
func (c *wireClient[T]) decodeItemsStream(ctx context.Context, o metav1.ListOptions, r *protoReader, meta *metav1.ListMeta, each func(items [][]byte, first int)) error {
	var chunk []byte
	var ends []int
	first := 0
	flush := func() {
		if len(ends) == 0 {
			return
		}
		items := make([][]byte, len(ends))
		start := 0
		for i, end := range ends {
			items[i] = chunk[start:end]
			start = end
		}
		each(items, first)
		first += len(items)
		chunk, ends = chunk[:0], ends[:0]
	}
	for !r.done() {
		num, wire, err := r.tag()
		if err != nil {
			return err
		}
		switch {
		case num == 1 && wire == 2:
			b, err := r.bytes(nil)
			if err != nil {
				return err
			}
			if err := meta.Unmarshal(b); err != nil {
				return fmt.Errorf("decode a list: %w", err)
			}
			c.readAhead(ctx, o, meta.Continue)
		case num == 2 && wire == 2:
			if chunk, err = r.bytes(chunk); err != nil {
				return err
			}
			ends = append(ends, len(chunk))
			if len(chunk) >= chunkBytes || len(ends) >= chunkItems {
				flush()
			}
		default:
			if err := r.skip(wire); err != nil {
				return err
			}
		}
	}
	flush()
	return nil
}

// protoReader reads the fields of a protobuf message from a stream: n
// bytes of it, or, if n is negative, up to the stream's end.
type protoReader struct {
	br *bufio.Reader
	n  int64
}

func (r *protoReader) done() bool {
	if r.n >= 0 {
		return r.n == 0
	}
	// Only the stream's end ends the message: a failed read (a broken
	// connection, the context's end) is left for the next read to report.
	_, err := r.br.Peek(1)
	return err == io.EOF
}

func (r *protoReader) consumed(n int64) {
	if r.n >= 0 {
		r.n -= n
	}
}

func (r *protoReader) varint() (uint64, error) {
	var v uint64
	for shift := uint(0); shift < 64; shift += 7 {
		if r.n == 0 {
			return 0, fmt.Errorf("%w: truncated varint", errProto)
		}
		c, err := r.br.ReadByte()
		if err != nil {
			return 0, fmt.Errorf("%w: truncated varint: %w", errProto, err)
		}
		r.consumed(1)
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v, nil
		}
	}
	return 0, fmt.Errorf("%w: varint overflows", errProto)
}

func (r *protoReader) tag() (num, wire int, err error) {
	t, err := r.varint()
	return int(t >> 3), int(t & 7), err
}

// length reads a length-delimited field's length, which must fit in what
// is left of the message and in maxFrame.
func (r *protoReader) length() (int, error) {
	n, err := r.varint()
	if err != nil {
		return 0, err
	}
	if (r.n >= 0 && n > uint64(r.n)) || n > 1<<31 {
		return 0, fmt.Errorf("%w: a field runs past its message", errProto)
	}
	return int(n), nil
}

// bytes reads a length-delimited field's bytes, appended to dst.
func (r *protoReader) bytes(dst []byte) ([]byte, error) {
	n, err := r.length()
	if err != nil {
		return dst, err
	}
	if n > maxFrame {
		return dst, fmt.Errorf("%w: an item of %d bytes, more than %d", errProto, n, maxFrame)
	}
	start := len(dst)
	dst = slices.Grow(dst, n)[:start+n]
	if _, err := io.ReadFull(r.br, dst[start:]); err != nil {
		return dst[:start], fmt.Errorf("%w: truncated: %w", errProto, err)
	}
	r.consumed(int64(n))
	return dst, nil
}

// skip reads past a field of wire type wire.
func (r *protoReader) skip(wire int) error {
	var n int
	switch wire {
	case 0:
		_, err := r.varint()
		return err
	case 1:
		n = 8
	case 5:
		n = 4
	case 2:
		var err error
		if n, err = r.length(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: wire type %d", errProto, wire)
	}
	if r.n >= 0 && int64(n) > r.n {
		return fmt.Errorf("%w: a field runs past its message", errProto)
	}
	if _, err := r.br.Discard(n); err != nil {
		return fmt.Errorf("%w: truncated: %w", errProto, err)
	}
	r.consumed(int64(n))
	return nil
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
	raw, err := c.pageBytes(ctx, o)
	if err != nil {
		return rawPage{}, err
	}
	return c.splitPage(ctx, o, raw, protoOnly)
}

// splitPage splits raw, a page as read, into its items, and starts
// reading the next page (see listRaw).
func (c *wireClient[T]) splitPage(ctx context.Context, o metav1.ListOptions, raw []byte, protoOnly bool) (rawPage, error) {
	p := rawPage{buf: raw}
	if msg, _, perr := unwrapObject(raw); perr == nil {
		p.proto = true
		if msg == nil {
			return p, errNoList
		}
		err := eachField(msg, func(f protoField) error {
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
	buf, err := c.readAheadFor(ctx, o)
	if buf != nil || err != nil {
		return buf, err
	}
	return c.readPage(ctx, o)
}

// readAheadFor takes the page read ahead, if it is the one o asks for and
// was read whole: its body, once read. It returns nil, nil if there is
// none, and ctx's error if ctx ends first. A read-ahead for another
// request is dropped either way.
func (c *wireClient[T]) readAheadFor(ctx context.Context, o metav1.ListOptions) ([]byte, error) {
	c.pages.mu.Lock()
	ra := c.pages.next
	c.pages.next = nil
	c.pages.mu.Unlock()
	if ra == nil {
		return nil, nil
	}
	if ra.opts != o {
		ra.cancel()
		return nil, nil
	}
	select {
	case <-ra.done:
		if ra.err != nil {
			return nil, nil // asked again, for the request's own error
		}
		return ra.buf, nil
	case <-ctx.Done():
		ra.cancel()
		return nil, ctx.Err()
	}
}

// recycle keeps buf, a decoded page's, for the next page if more are to
// come; after a list's last page nothing is kept.
func (p *pages) recycle(buf []byte, more bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if more {
		p.spare = buf
	} else {
		p.spare = nil
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
	// Its own context, so that dropping it ends its request (the body is
	// read whole before cancel runs on success).
	rctx, cancel := context.WithCancel(ctx)
	ra := &readAhead{opts: o, cancel: cancel, done: make(chan struct{})}
	c.pages.mu.Lock()
	old := c.pages.next
	c.pages.next = ra
	c.pages.mu.Unlock()
	if old != nil {
		old.cancel()
	}
	go func() {
		defer close(ra.done)
		defer cancel()
		ra.buf, ra.err = c.readPage(rctx, o)
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
			// Doubled, not append's 1.25 for large slices: a page of
			// megabytes read in small pieces would otherwise leave
			// several times its size as garbage on the way.
			nb := make([]byte, len(b), max(2*cap(b), 64<<10))
			copy(nb, b)
			b = nb
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
