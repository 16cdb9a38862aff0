package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/listwatch/mirror"
)

// closedGrace is how long a call that finds the client closed waits for
// its caller's context to end. A program that shuts down closes the client
// and cancels the mirror's context, in either order; waiting a moment for
// the context makes the call end with the context's error, which a
// Reflector takes quietly, rather than with a failure it reports.
const closedGrace = 5 * time.Second

// errClientClosed is wrapped, with mirror.ErrPermanent, by the error of a
// call that finds the client closed while its caller goes on.
var errClientClosed = fmt.Errorf("etcd client closed")

// clientClosed returns nil if the client is open. If it is closed, it
// waits up to closedGrace for ctx to end and returns ctx.Err(), or else an
// error wrapping mirror.ErrPermanent: a closed client never serves again.
func (lw *ListWatcher[V]) clientClosed(ctx context.Context) error {
	// A client made without New (a test's) has no context of its own.
	if cctx := lw.client.Ctx(); cctx == nil || cctx.Err() == nil {
		return nil
	}
	t := time.NewTimer(closedGrace)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("etcd: %q: %w: %w", lw.prefix, errClientClosed, mirror.ErrPermanent)
	}
}

// wrapError is the package's wrapError for a call with lw's client, which
// it says was closed, if it was, instead of reporting the error the
// closed client caused. A call that ran out of Options.RequestTimeout
// says so, with what the client's connection tells of why (see
// diagnose).
func (lw *ListWatcher[V]) wrapError(ctx context.Context, err error, format string, args ...any) error {
	if cerr := lw.clientClosed(ctx); cerr != nil {
		return cerr
	}
	if d := lw.opts.requestTimeout(); d > 0 && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		err = &noAnswerError{what: fmt.Sprintf("no answer within %v", d), diagnosis: lw.diagnose(ctx), err: err}
	}
	return wrapError(ctx, err, format, args...)
}
