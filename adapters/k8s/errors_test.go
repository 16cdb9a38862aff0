package k8s

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"
	"testing"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
)

var (
	pods    = schema.GroupResource{Resource: "pods"}
	widgets = schema.GroupResource{Group: "mirror.example.com", Resource: "widgets"}
)

// tooLarge is the error a kube-apiserver since 1.19 returns for a version
// it has not reached.
func tooLarge() error {
	err := apierrors.NewTimeoutError("Too large resource version: 12, current: 10", 1)
	err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}}
	return err
}

// gone is the 410 Gone that servers before 1.18 returned where newer ones
// say Expired.
func gone() error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonGone, Message: "gone",
	}}
}

// netError is what client-go returns when a request fails below HTTP.
func netError(op string, errno syscall.Errno) error {
	return &url.Error{Op: "Get", URL: "https://127.0.0.1:6443/api/v1/pods", Err: &net.OpError{
		Op: op, Net: "tcp", Err: os.NewSyscallError(op, errno),
	}}
}

func TestClassify_MapsKubernetesErrorsToMirrorKinds(t *testing.T) {
	live := context.Background()
	done, cancel := context.WithCancel(live)
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want error
	}{
		{"410 expired", live, apierrors.NewResourceExpired("too old resource version: 5 (10)"), source.ErrExpired},
		{"410 gone", live, gone(), source.ErrExpired},
		{"410 expired continue token", live, apierrors.NewResourceExpired("The provided continue parameter is too old"), source.ErrExpired},
		{"too large resource version", live, tooLarge(), source.ErrTooLargeResourceVersion},
		{"too large resource version, before 1.19", live, apierrors.NewTimeoutError("Too large resource version: 12, current: 10", 1), source.ErrTooLargeResourceVersion},
		{"429", live, apierrors.NewTooManyRequests("slow down", 1), source.ErrUnavailable},
		{"503", live, apierrors.NewServiceUnavailable("starting"), source.ErrUnavailable},
		{"504 server timeout", live, apierrors.NewServerTimeout(pods, "list", 1), source.ErrUnavailable},
		{"504 timeout", live, apierrors.NewTimeoutError("storage did not answer", 0), source.ErrUnavailable},
		{"502 from a proxy", live, apierrors.NewGenericServerResponse(http.StatusBadGateway, "get", pods, "", "", 0, false), source.ErrUnavailable},
		{"connection refused", live, netError("dial", syscall.ECONNREFUSED), source.ErrUnavailable},
		{"connection reset", live, netError("read", syscall.ECONNRESET), source.ErrUnavailable},
		{"no route", live, netError("dial", syscall.EHOSTUNREACH), source.ErrUnavailable},
		{"unexpected EOF", live, &url.Error{Op: "Get", URL: "https://x", Err: io.ErrUnexpectedEOF}, source.ErrUnavailable},
		{"http2 connection lost", live, errors.New("http2: client connection lost"), source.ErrUnavailable},
		{"client timeout", live, &url.Error{Op: "Get", URL: "https://x", Err: context.DeadlineExceeded}, source.ErrUnavailable},
		{"caller's deadline", done, context.DeadlineExceeded, nil},
		{"caller canceled", done, &url.Error{Op: "Get", URL: "https://x", Err: context.Canceled}, nil},
		{"500", live, apierrors.NewInternalError(errors.New("boom")), nil},
		{"401 unauthorized", live, apierrors.NewUnauthorized("bad token"), mirror.ErrPermanent},
		{"401 from a proxy", live, apierrors.NewGenericServerResponse(http.StatusUnauthorized, "get", pods, "", "", 0, true), mirror.ErrPermanent},
		{"403 forbidden", live, apierrors.NewForbidden(pods, "", errors.New("rbac")), mirror.ErrPermanent},
		{"403 without a reason", live, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusForbidden}}, mirror.ErrPermanent},
		{"404 resource type not served", live, apierrors.NewGenericServerResponse(http.StatusNotFound, "get", widgets, "", "404 page not found", 0, true), mirror.ErrPermanent},
		{"404 of a collection", live, apierrors.NewNotFound(pods, ""), mirror.ErrPermanent},
		{"404 without details", live, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound}}, mirror.ErrPermanent},
		{"404 of one object", live, apierrors.NewNotFound(pods, "web-1"), nil},
		{"404 of a namespace", live, apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "shop"), nil},
		{"405", live, apierrors.NewMethodNotSupported(pods, "watch"), nil},
		{"400", live, apierrors.NewBadRequest("bad"), nil},
		{"other", live, errors.New("boom"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, classify(tc.ctx, tc.err))
		})
	}
}

func TestWrapError_KeepsKindAndCauseVisible(t *testing.T) {
	cause := apierrors.NewResourceExpired("too old resource version: 5 (10)")
	err := wrapError(context.Background(), cause, "k8s: watch %s from resource version %q", "*v1.Pod", "5")
	require.ErrorIs(t, err, source.ErrExpired)
	var status *apierrors.StatusError
	require.ErrorAs(t, err, &status)
	assert.Equal(t, cause, status)
	assert.Equal(t, `k8s: watch *v1.Pod from resource version "5": mirror: resource version expired: too old resource version: 5 (10)`, err.Error())

	err = wrapError(context.Background(), errors.New("boom"), "k8s: list %s", "*v1.Pod")
	assert.Equal(t, `k8s: list *v1.Pod: boom`, err.Error())
}

func TestStreamingRefused_RecognisesTheServersRefusals(t *testing.T) {
	invalid := func(fields ...string) error {
		var errs field.ErrorList
		for _, f := range fields {
			errs = append(errs, field.Forbidden(field.NewPath(f), "forbidden"))
		}
		return apierrors.NewInvalid(schema.GroupKind{Group: "meta.k8s.io", Kind: "ListOptions"}, "", errs)
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"WatchList gate off", invalid("sendInitialEvents"), true},
		{"server before 1.27", invalid("resourceVersionMatch"), true},
		{"another invalid option", invalid("fieldSelector"), false},
		{"invalid without causes", apierrors.NewInvalid(schema.GroupKind{Kind: "ListOptions"}, "", nil), false},
		{"expired", apierrors.NewResourceExpired("too old"), false},
		{"other", errors.New("sendInitialEvents"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, streamingRefused(tc.err))
		})
	}
}

func TestRefusals_WrapErrPermanentFromEveryRequest(t *testing.T) {
	refusals := []struct {
		name string
		err  *apierrors.StatusError
	}{
		{"401", apierrors.NewUnauthorized("invalid bearer token")},
		{"403", apierrors.NewForbidden(pods, "", errors.New(`User "nobody" cannot list resource "pods"`))},
		{"404 resource type", apierrors.NewGenericServerResponse(http.StatusNotFound, "get", widgets, "", "404 page not found", 0, true)},
	}
	// Each request the adapter makes, made to fail with err; it returns
	// the error the caller sees.
	requests := []struct {
		name string
		do   func(t *testing.T, err *apierrors.StatusError) error
	}{
		{"List", func(t *testing.T, err *apierrors.StatusError) error {
			f := &fakePods{lists: []fakeList{{err: err}}}
			_, got := f.lw(Options{}).List(context.Background(), source.ListOptions{ResourceVersion: "0", Limit: 500})
			return got
		}},
		{"Watch", func(t *testing.T, err *apierrors.StatusError) error {
			f := &fakePods{watches: []fakeWatch{{err: err}}}
			_, got := f.lw(Options{}).Watch(context.Background(), source.WatchOptions{ResourceVersion: "5"})
			return got
		}},
		{"Watch from now", func(t *testing.T, err *apierrors.StatusError) error {
			f := &fakePods{lists: []fakeList{{err: err}}}
			_, got := f.lw(Options{}).Watch(context.Background(), source.WatchOptions{})
			return got
		}},
		{"streaming list", func(t *testing.T, err *apierrors.StatusError) error {
			f := &fakePods{watches: []fakeWatch{{err: err}}}
			_, got := f.lw(Options{}).Watch(context.Background(), source.WatchOptions{SendInitialEvents: true})
			assert.NotErrorIs(t, got, errors.ErrUnsupported, "a refusal of the client is not one of streaming")
			return got
		}},
		{"watch Error event", func(t *testing.T, err *apierrors.StatusError) error {
			src := newFakeSource()
			f := &fakePods{watches: []fakeWatch{{src: src}}}
			w, werr := f.lw(Options{}).Watch(context.Background(), source.WatchOptions{ResourceVersion: "5"})
			require.NoError(t, werr)
			defer w.Stop()
			src.events <- watch.Event{Type: watch.Error, Object: &err.ErrStatus}
			_, got := w.Next(context.Background())
			return got
		}},
	}
	for _, req := range requests {
		for _, r := range refusals {
			t.Run(req.name+"/"+r.name, func(t *testing.T) {
				err := req.do(t, r.err)
				require.ErrorIs(t, err, mirror.ErrPermanent)
				for _, kind := range []error{source.ErrExpired, source.ErrTooLargeResourceVersion, source.ErrUnavailable} {
					assert.NotErrorIs(t, err, kind)
				}
				var status *apierrors.StatusError
				require.ErrorAs(t, err, &status, "the server's status stays visible")
				assert.Equal(t, r.err.ErrStatus.Code, status.ErrStatus.Code)
			})
		}
	}
}
