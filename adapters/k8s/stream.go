package k8s

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	sigsjson "sigs.k8s.io/json"
)

const (
	// maxBatch is the most events a batch holds: a reader that finds
	// more already received starts the next batch.
	maxBatch = 128
	// maxFrame is the largest event the adapter reads, as client-go's
	// watch decoder (an object the server stores is at most 1.5 MB).
	maxFrame = 16 << 20
)

// wireWatch is a watch whose events a goroutine reads and others decode,
// a batch at a time, while the next ones arrive; next hands them on in
// the order they came.
type wireWatch[T Object] struct {
	c      *wireClient[T]
	body   io.ReadCloser
	ctx    context.Context // the request's; cancel ends the reading
	cancel context.CancelFunc
	// encoded hands on each object's protobuf message undecoded, as an
	// *encodedObject in the memory of its batch (WatchEncoded).
	encoded bool

	ordered chan *eventBatch // every batch, in stream order
	work    chan *eventBatch // batches to decode
	free    chan *eventBatch // batches handed on, to reuse
	wg      sync.WaitGroup

	// Owned by the goroutine calling next.
	cur *eventBatch
	pos int
}

// eventBatch is a run of events read together.
type eventBatch struct {
	buf    []byte
	ends   []int // where each event ends in buf
	events []watch.Event
	errs   []error // an event's decoding error, with its event left empty
	// err ends the stream after the events: io.EOF or a decoding error.
	err  error
	done chan struct{} // closed when decoded
}

// watch starts a watch and its goroutines, which end when ctx does or
// Stop is called. With encoded, objects are handed on as their
// encodings (see wireWatch.encoded).
func (c *wireClient[T]) watch(ctx context.Context, o metav1.ListOptions, encoded bool) (*wireWatch[T], error) {
	ctx, cancel := context.WithCancel(ctx)
	body, err := c.request(o).Stream(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	depth := 2 * c.workers
	w := &wireWatch[T]{c: c, body: body, ctx: ctx, cancel: cancel, encoded: encoded,
		ordered: make(chan *eventBatch, depth), work: make(chan *eventBatch, depth), free: make(chan *eventBatch, depth+2)}
	w.wg.Go(w.read)
	for range c.workers {
		w.wg.Go(w.decodeBatches)
	}
	return w, nil
}

// read reads events into batches until the stream or the context ends.
func (w *wireWatch[T]) read() {
	defer close(w.work)
	defer close(w.ordered)
	br := bufio.NewReaderSize(w.body, 64<<10)
	var frame func(b *eventBatch) error
	first, err := br.Peek(1)
	isJSON := err == nil && first[0] == '{'
	if isJSON {
		w.c.servesJSON.Store(true)
	}
	switch {
	case isJSON && w.encoded:
		// JSON has no encodings to hand on: the stream ends before its
		// first event.
		frame = func(*eventBatch) error { return fmt.Errorf("a JSON watch: %w", ErrNotEncoded) }
	case isJSON:
		dec := json.NewDecoder(br)
		frame = func(b *eventBatch) error {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				var syn *json.SyntaxError
				if errors.As(err, &syn) {
					// Not JSON: no read failure but one of decoding,
					// which client-go reports as such.
					return decodingError(errJSON(err))
				}
				return endOfStream(err)
			}
			b.buf = append(b.buf, raw...)
			return nil
		}
	default:
		frame = func(b *eventBatch) error { return readFrame(br, b) }
	}
	for {
		b := w.batch()
		for len(b.ends) < maxBatch {
			if err := frame(b); err != nil {
				b.err = err
				break
			}
			b.ends = append(b.ends, len(b.buf))
			if br.Buffered() == 0 {
				break
			}
		}
		select {
		case w.ordered <- b:
		case <-w.ctx.Done():
			return
		}
		select {
		case w.work <- b:
		case <-w.ctx.Done():
			return
		}
		if b.err != nil {
			return
		}
	}
}

// batch returns an empty batch, one handed on before if there is one.
func (w *wireWatch[T]) batch() *eventBatch {
	select {
	case b := <-w.free:
		b.buf, b.ends, b.events, b.errs, b.err = b.buf[:0], b.ends[:0], b.events[:0], b.errs[:0], nil
		b.done = make(chan struct{})
		return b
	default:
		return &eventBatch{done: make(chan struct{})}
	}
}

// readFrame reads one length-prefixed protobuf event into b.buf.
func readFrame(br *bufio.Reader, b *eventBatch) error {
	var l [4]byte
	if _, err := io.ReadFull(br, l[:]); err != nil {
		return endOfStream(err)
	}
	n := binary.BigEndian.Uint32(l[:])
	if n > maxFrame {
		return decodingError(fmt.Errorf("an event of %d bytes, more than %d", n, maxFrame))
	}
	start := len(b.buf)
	b.buf = append(b.buf, make([]byte, n)...)
	if _, err := io.ReadFull(br, b.buf[start:]); err != nil {
		return endOfStream(err)
	}
	return nil
}

// endOfStream is how the adapter reports a stream that ended, cleanly or
// not: as client-go does, with io.EOF (the next request says what is
// wrong, if anything).
func endOfStream(error) error { return io.EOF }

// decodingError is an event client-go could not decode: a 500 whose
// cause is ClientWatchDecoding, as client-go reports it.
func decodingError(err error) error {
	return apierrors.FromObject(apierrors.NewClientErrorReporter(500, "GET", "ClientWatchDecoding").AsObject(err))
}

// decodeBatches decodes the batches of w.work until it closes.
func (w *wireWatch[T]) decodeBatches() {
	var scratch []byte
	for b := range w.work {
		start := 0
		for _, end := range b.ends {
			var ev watch.Event
			var err error
			ev, scratch, err = w.decodeEvent(b.buf[start:end], scratch)
			b.events = append(b.events, ev)
			b.errs = append(b.errs, err)
			start = end
		}
		close(b.done)
	}
}

// decodeEvent decodes one event, protobuf or JSON.
func (w *wireWatch[T]) decodeEvent(raw, scratch []byte) (watch.Event, []byte, error) {
	var ev watch.Event
	if len(raw) > 0 && raw[0] == '{' {
		var e struct {
			Type   watch.EventType `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := json.Unmarshal(raw, &e); err != nil {
			return ev, scratch, errJSON(err)
		}
		ev.Type = e.Type
		if e.Type == watch.Error {
			st := new(metav1.Status)
			if err := sigsjson.UnmarshalCaseSensitivePreserveInts(e.Object, st); err != nil {
				return ev, scratch, errJSON(err)
			}
			ev.Object = st
			return ev, scratch, nil
		}
		obj, scratch, err := w.c.decode(e.Object, false, scratch)
		ev.Object = obj
		return ev, scratch, err
	}
	var object []byte
	err := eachField(raw, func(f protoField) error {
		switch {
		case f.num == 1 && f.wire == 2:
			ev.Type = watch.EventType(f.data)
		case f.num == 2 && f.wire == 2:
			return eachField(f.data, func(rf protoField) error {
				if rf.num == 1 && rf.wire == 2 {
					object = rf.data
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return ev, scratch, err
	}
	msg, _, err := unwrapObject(object)
	if err != nil {
		return ev, scratch, err
	}
	switch ev.Type {
	case watch.Error:
		st := new(metav1.Status)
		if err := st.Unmarshal(msg); err != nil {
			return ev, scratch, err
		}
		ev.Object = st
		return ev, scratch, nil
	case watch.Added, watch.Modified, watch.Deleted:
		if w.encoded {
			// The batch's memory is this event's alone until it is
			// handed on: managedFields are dropped in place.
			obj, err := w.c.encodedObject(msg)
			ev.Object = obj
			return ev, scratch, err
		}
	}
	obj, scratch, err := w.c.decode(msg, true, scratch)
	ev.Object = obj
	return ev, scratch, err
}

// next returns the next event, or the error of one that could not be
// decoded (objErr, the stream goes on), or the end of the stream (end:
// io.EOF, a decoding error, or ctx's error).
func (w *wireWatch[T]) next(ctx context.Context) (ev watch.Event, objErr, end error) {
	for {
		if b := w.cur; b != nil {
			select {
			case <-b.done:
			case <-ctx.Done():
				return ev, nil, ctx.Err()
			case <-w.ctx.Done():
				// Stopped: the batch may never be decoded.
				return ev, nil, io.EOF
			}
			if w.pos < len(b.events) {
				i := w.pos
				w.pos++
				return b.events[i], b.errs[i], nil
			}
			if b.err != nil {
				return ev, nil, b.err
			}
			clear(b.events)
			w.cur = nil
			select {
			case w.free <- b:
			default:
			}
		}
		select {
		case b, ok := <-w.ordered:
			if !ok {
				return ev, nil, io.EOF
			}
			w.cur, w.pos = b, 0
		case <-ctx.Done():
			return ev, nil, ctx.Err()
		case <-w.ctx.Done():
			return ev, nil, io.EOF
		}
	}
}

// Stop ends the watch: it closes the connection and waits for the
// goroutines reading and decoding it.
func (w *wireWatch[T]) Stop() {
	w.cancel()
	_ = w.body.Close()
	w.wg.Wait()
}

// ResultChan is nil: a wireWatch hands its events on through next. It
// makes *wireWatch a watch.Interface, which the watcher holds.
func (w *wireWatch[T]) ResultChan() <-chan watch.Event { return nil }

var _ watch.Interface = (*wireWatch[*metav1.PartialObjectMetadata])(nil)
