package k8s

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// classify returns the mirror error kind of err, an error from the client
// or the server, or nil if none applies. ctx is the caller's context: a
// deadline or cancellation while ctx is still live came from the client's
// own timeout, so the server did not answer in time.
func classify(ctx context.Context, err error) error {
	switch {
	case apierrors.IsResourceExpired(err), apierrors.IsGone(err):
		// Servers before 1.18 said Gone where newer ones say Expired;
		// both are HTTP 410.
		return source.ErrExpired
	case isTooLargeResourceVersion(err):
		return source.ErrTooLargeResourceVersion
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		if ctx.Err() == nil {
			return source.ErrUnavailable
		}
		return nil
	case apierrors.IsTooManyRequests(err), apierrors.IsServiceUnavailable(err),
		apierrors.IsServerTimeout(err), apierrors.IsTimeout(err):
		// Throttled, or the server (or its storage) did not answer in
		// time: all pass, and the history after the last version seen is
		// still there.
		return source.ErrUnavailable
	case apierrors.IsUnauthorized(err), apierrors.IsForbidden(err), isResourceNotFound(err):
		// The credentials are refused or may not read these objects, or
		// the server does not serve their type: asking again changes
		// nothing until someone acts.
		return mirror.ErrPermanent
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		switch status.Status().Code {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			// A proxy in front of the server lost it.
			return source.ErrUnavailable
		}
		return nil
	}
	var opErr *net.OpError
	switch {
	case utilnet.IsConnectionRefused(err), utilnet.IsConnectionReset(err),
		utilnet.IsHTTP2ConnectionLost(err), utilnet.IsProbableEOF(err), utilnet.IsTimeout(err):
		return source.ErrUnavailable
	case errors.As(err, &opErr) && opErr.Op == "dial":
		// No route, no such host: the server cannot be reached now.
		return source.ErrUnavailable
	}
	return nil
}

// isResourceNotFound reports whether err is a 404 about the resource type
// rather than about one object: the server does not serve the path of
// the collection (a custom resource whose definition is missing or not
// yet established, a group or version it does not know, a namespaced
// path for a cluster-scoped type). A list or watch of a collection never
// gets a 404 for an object (a namespace that does not exist, or a field
// selector naming an object that does not, lists nothing), but a 404
// that names one comes from a request about that object, such as a Get
// behind a cache.ListerWatcher, and says that object is gone, not that
// the type is: that is no reason to stop waiting for a sync.
func isResourceNotFound(err error) bool {
	var status apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	return d == nil || d.Name == ""
}

// isTooLargeResourceVersion reports whether err says the server has not yet
// reached the resource version asked for. Servers since 1.19 say so with a
// status cause; earlier ones only in the message of a timeout.
func isTooLargeResourceVersion(err error) bool {
	if apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) {
		return true
	}
	var status apierrors.APIStatus
	return apierrors.IsTimeout(err) && errors.As(err, &status) &&
		strings.Contains(status.Status().Message, "Too large resource version")
}

// streamingRefused reports whether err is a server's refusal of a
// streaming list: the server does not know sendInitialEvents, or has it
// turned off (the WatchList feature gate), and says the request is
// invalid.
func streamingRefused(err error) bool {
	if !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) {
		return false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, c := range status.Status().Details.Causes {
		if c.Field == "sendInitialEvents" || c.Field == "resourceVersionMatch" {
			return true
		}
	}
	return false
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
