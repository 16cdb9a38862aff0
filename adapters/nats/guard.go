package nats

import (
	"context"
	"errors"
	"fmt"
	"time"

	natsgo "github.com/nats-io/nats.go"
)

var (
	errDisconnected = errors.New("connection to the server lost")
	errNoAnswer     = errors.New("no answer in time")
	errClosed       = errors.New("connection closed for good")
)

// lost is the cause of a watch or request that saw the connection in
// status s: errClosed, with the client's last error (refused credentials,
// say), for a connection closed for good; errDisconnected otherwise.
func lost(nc *natsgo.Conn, s natsgo.Status) error {
	if s == natsgo.CLOSED {
		if last := nc.LastError(); last != nil {
			return fmt.Errorf("%w: %w", errClosed, last)
		}
		return errClosed
	}
	return fmt.Errorf("%w (connection %v)", errDisconnected, s)
}

// guard calls fail, once, with the cause, if the client's connection is
// not up or goes down, or if timeout passes (none if it is not positive),
// before the returned stop is called. The client does not end a request
// or the start of a watcher when its connection goes down: it waits for an
// answer that cannot come until the timeout, and a request made while it
// reconnects waits in its buffer. stop returns the cause fail was called
// with, if any, and returns once the guard is gone. A timeout whose
// request the server refused as a permissions violation says so.
func (lw *ListWatcher[V]) guard(timeout time.Duration, fail func(cause error)) (stop func() error) {
	nc := lw.js.Conn()
	var status chan natsgo.Status
	if nc != nil {
		status = nc.StatusChanged(natsgo.RECONNECTING, natsgo.DISCONNECTED, natsgo.CLOSED)
	}
	var timer *time.Timer
	var expired <-chan time.Time
	if timeout > 0 {
		timer = time.NewTimer(timeout)
		expired = timer.C
	}
	done, gone := make(chan struct{}), make(chan struct{})
	var cause error
	go func() {
		defer close(gone)
		if nc != nil {
			if s := nc.Status(); s != natsgo.CONNECTED {
				cause = lost(nc, s)
				fail(cause)
				return
			}
		}
		select {
		case s, ok := <-status:
			if ok {
				cause = lost(nc, s)
				fail(cause)
			}
		case <-expired:
			cause = fmt.Errorf("%w: %v", errNoAnswer, timeout)
			if nc != nil {
				// The server drops a request the user may not send,
				// and tells the client apart, which keeps it as its
				// last error.
				if last := nc.LastError(); errors.Is(last, natsgo.ErrPermissionViolation) {
					cause = fmt.Errorf("%w: %w", cause, last)
				}
			}
			fail(cause)
		case <-done:
		}
	}()
	return func() error {
		close(done)
		<-gone
		if timer != nil {
			timer.Stop()
		}
		if status != nil {
			nc.RemoveStatusListener(status)
		}
		return cause
	}
}

// request runs fn with a context that ends with ctx, after
// Options.RequestTimeout, or when the connection goes down. An error fn
// returns because of the latter two is replaced by one that says so and
// wraps source.ErrUnavailable (see classify).
func (lw *ListWatcher[V]) request(ctx context.Context, fn func(ctx context.Context) error) error {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := lw.guard(lw.opts.requestTimeout(), cancel)
	err := fn(rctx)
	if cause := stop(); cause != nil && err != nil {
		return cause
	}
	return err
}

// watcherClosed is the cause of a client watcher that closed on its own:
// the client closes its watchers when the connection closes, maybe before
// it reports the new status, which this reads.
func (lw *ListWatcher[V]) watcherClosed() error {
	if nc := lw.js.Conn(); nc != nil {
		if s := nc.Status(); s != natsgo.CONNECTED {
			return lost(nc, s)
		}
	}
	return errWatchClosed
}
