package k8s

import (
	"context"
	"errors"
	"fmt"

	"github.com/listwatch/mirror/source"
	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// CompareVersions orders two resource versions of the ListWatcher's
// resource, as k8s.io/apimachinery's resourceversion.CompareResourceVersion
// does: positive decimal integers, a larger one newer, which Kubernetes
// guarantees since 1.35 (KEP-5504). It implements source.VersionComparer,
// so that an informer can wait for a version
// (mirror.Informer.WaitForVersion) and read consistently. A version that
// is not well formed gets an error wrapping source.ErrInvalidVersion.
func (lw *ListWatcher[T]) CompareVersions(a, b string) (int, error) {
	return compareResourceVersions(a, b)
}

func compareResourceVersions(a, b string) (int, error) {
	c, err := resourceversion.CompareResourceVersion(a, b)
	if err != nil {
		return 0, fmt.Errorf("k8s: %w: %w", source.ErrInvalidVersion, err)
	}
	return c, nil
}

// CurrentVersion returns the resource version of a consistent list of at
// most one object: the cluster's current revision, no older than any write
// that completed before the call. It implements source.CurrentVersioner.
// Errors are classified as List's are.
//
// The kube-apiserver takes no progress requests, and a watch of a quiet
// resource hears of the cluster's newer revisions only by a bookmark about
// once a minute: a consistent read of such a resource may wait out its
// bound. Give it ConsistentOptions.Fallback, or wait for the version of
// your own write (Informer.WaitForVersion), which the watch brings at once.
func (lw *ListWatcher[T]) CurrentVersion(ctx context.Context) (string, error) {
	rv, err := lw.listVersion(ctx)
	if err != nil {
		return "", fmt.Errorf("k8s: current version of %s: %w", lw.what, err)
	}
	return rv, nil
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
	cv, ok := c.lw.(source.CurrentVersioner)
	if !ok {
		return "", fmt.Errorf("k8s: compact: the wrapped ListWatcher cannot say its current version: %w", errors.ErrUnsupported)
	}
	return cv.CurrentVersion(ctx)
}
