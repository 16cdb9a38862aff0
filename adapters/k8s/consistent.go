package k8s

import (
	"context"
	"errors"
	"fmt"

	"github.com/listwatch/mirror"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// CompareVersions orders two resource versions of the ListWatcher's
// resource; it implements mirror.VersionComparer, so that an informer of
// Kubernetes objects can wait for a version (mirror.Informer.WaitForVersion)
// and serve consistent reads.
//
// Kubernetes long documented resource versions as opaque strings that
// clients may only test for equality. Since 1.35 (KEP-5504, "Comparable
// Resource Version", stable) a client may order the resource versions of
// objects of one resource: they are positive decimal integers without
// leading zeros, and a larger one is newer; client-go's
// k8s.io/apimachinery/pkg/util/resourceversion.CompareResourceVersion
// compares them, and CompareVersions uses it. They are the revisions of
// the etcd cluster that stores the resource, which is what lets the
// kube-apiserver serve consistent lists from its watch cache (KEP-2340).
// An informer holds one resource, so the comparison always has meaning
// for it. A version that is not well formed gets an error wrapping
// mirror.ErrInvalidVersion.
func (lw *ListWatcher[T]) CompareVersions(a, b string) (int, error) {
	return compareResourceVersions(a, b)
}

func compareResourceVersions(a, b string) (int, error) {
	c, err := resourceversion.CompareResourceVersion(a, b)
	if err != nil {
		return 0, fmt.Errorf("k8s: %w: %w", mirror.ErrInvalidVersion, err)
	}
	return c, nil
}

// CurrentVersion returns the resource version of a consistent list of at
// most one object, as the kube-apiserver answers it: etcd's current
// revision, no older than any write that completed before the call; it
// implements mirror.CurrentVersioner. Errors are classified as List's
// are.
//
// The revision is the whole cluster's, and a watch of one resource hears
// only that resource's changes, plus a bookmark about once a minute: the
// kube-apiserver takes no progress requests from its clients. A consistent
// read of a resource that is quiet while others change may therefore wait
// out its bound; give it ConsistentOptions.Fallback, or wait for the
// version of your own write (Informer.WaitForVersion), which the watch
// brings at once.
func (lw *ListWatcher[T]) CurrentVersion(ctx context.Context) (string, error) {
	o := lw.listOptions()
	o.Limit = 1
	list, err := lw.list(ctx, o)
	if err == nil && isNil(list) {
		err = errors.New("nil list and nil error from the client")
	}
	if err != nil {
		return "", wrapError(ctx, err, "k8s: current version of %s", lw.what)
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return "", fmt.Errorf("k8s: current version of %s: %w", lw.what, err)
	}
	return lm.GetResourceVersion(), nil
}

// CompareVersions orders resource versions as ListWatcher.CompareVersions
// does: a compact informer of a Kubernetes resource can wait for a
// version and serve consistent reads too.
func (c *compactLW[T]) CompareVersions(a, b string) (int, error) {
	return compareResourceVersions(a, b)
}

// CurrentVersion passes on the current version of the ListWatcher the
// compact one wraps; one that cannot say it gets an error wrapping
// errors.ErrUnsupported.
func (c *compactLW[T]) CurrentVersion(ctx context.Context) (string, error) {
	cv, ok := c.lw.(mirror.CurrentVersioner)
	if !ok {
		return "", fmt.Errorf("k8s: compact: the wrapped ListWatcher cannot say its current version: %w", errors.ErrUnsupported)
	}
	return cv.CurrentVersion(ctx)
}
