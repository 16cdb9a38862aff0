package nats

import (
	"context"
	"errors"
	"fmt"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// classify returns the mirror error kind of err, an error from the server
// or the client, or nil if none applies. ctx is the caller's context: a
// deadline that expired while ctx is still live was this adapter's own
// request timeout, so the server did not answer in time.
func classify(ctx context.Context, err error) error {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		if ctx.Err() == nil {
			return source.ErrUnavailable
		}
		return nil
	case errors.Is(err, natsgo.ErrAuthorization), errors.Is(err, natsgo.ErrPermissionViolation),
		errors.Is(err, natsgo.ErrAuthExpired), errors.Is(err, natsgo.ErrAuthRevoked):
		// The credentials are refused, or may not use the bucket: only
		// someone changing the server's accounts or the client's
		// configuration cures that.
		return mirror.ErrPermanent
	case errors.Is(err, errClosed), errors.Is(err, natsgo.ErrConnectionClosed):
		// A closed connection never reconnects: the client must be
		// made again.
		return mirror.ErrPermanent
	case errors.Is(err, jetstream.ErrBucketNotFound), errors.Is(err, jetstream.ErrStreamNotFound),
		errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		// What is mirrored does not exist.
		return mirror.ErrPermanent
	case errors.As(err, &apiErr) && (apiErr.Code == 401 || apiErr.Code == 403):
		return mirror.ErrPermanent
	case errors.Is(err, natsgo.ErrConnectionDraining),
		errors.Is(err, natsgo.ErrDisconnected), errors.Is(err, natsgo.ErrTimeout),
		errors.Is(err, natsgo.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, errWatchClosed), errors.Is(err, errNoProgress),
		errors.Is(err, errDisconnected), errors.Is(err, errNoAnswer):
		// The server is down or unreachable, or JetStream has no leader
		// for the bucket yet: all pass once the server is back.
		return source.ErrUnavailable
	case errors.As(err, &apiErr) && apiErr.Code == 503:
		return source.ErrUnavailable
	}
	return nil
}

// wrapError describes err with the message format and args, and makes both
// err and its mirror kind (if any) visible to errors.Is.
func wrapError(ctx context.Context, err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	if kind := classify(ctx, err); kind != nil {
		return fmt.Errorf("%s: %w: %w", what, kind, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
