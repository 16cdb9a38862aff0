package source

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// CurrentVersioner is implemented by a ListWatcher that can say cheaply
// which version it is at, read consistently: a version no older than any
// change that completed before the call. A consistent read of an informer
// learns it, then waits for the cache to reach it. etcd answers with a
// count-only range (one round trip, no keys sent), a kube-apiserver with
// a list of at most one object, memsource with its revision.
type CurrentVersioner interface {
	// CurrentVersion returns the source's current version.
	CurrentVersion(ctx context.Context) (string, error)
}

// ProgressRequester is implemented by a ListWatcher that can be asked to
// confirm its open watches' progress: to send each, soon, a bookmark at
// the version it has reached, rather than leave it at the version of the
// last change that concerned it (etcd's progress request). A consistent
// read asks while it waits, so that a cache whose part of the source is
// quiet still learns that it is current. The answer arrives as
// Bookmark on watches that allow bookmarks.
type ProgressRequester interface {
	// RequestProgress asks for bookmarks and returns without waiting for
	// them; an error says the request could not be sent.
	RequestProgress(ctx context.Context) error
}

// ErrInvalidVersion is wrapped by the error for a resource version that a
// version comparison cannot read.
var ErrInvalidVersion = errors.New("mirror: invalid resource version")

// VersionComparer is implemented by a ListWatcher whose resource versions
// are ordered, so that an informer can wait until its cache has applied a
// given version (Informer.WaitForVersion) and serve consistent reads. The
// etcd and Kubernetes adapters and memsource implement it. A ListWatcher
// that wraps another hides it unless it has the method too; an informer
// can also be given the comparison directly (InformerOptions.CompareVersions).
type VersionComparer interface {
	// CompareVersions returns -1 if version a is older than b, 0 if they
	// are the same version and +1 if a is newer, or an error wrapping
	// ErrInvalidVersion if either is not a version of this
	CompareVersions(a, b string) (int, error)
}

// CompareDecimalVersions compares versions that are non-negative decimal
// integers, as the revisions of etcd and memsource are and as the
// resource versions of a kube-apiserver backed by etcd are. It returns an
// error wrapping ErrInvalidVersion for any other string, the empty one
// included.
func CompareDecimalVersions(a, b string) (int, error) {
	x, err := parseDecimalVersion(a)
	if err != nil {
		return 0, err
	}
	y, err := parseDecimalVersion(b)
	if err != nil {
		return 0, err
	}
	switch {
	case x < y:
		return -1, nil
	case x > y:
		return 1, nil
	}
	return 0, nil
}

func parseDecimalVersion(v string) (uint64, error) {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w %q: want a decimal revision", ErrInvalidVersion, v)
	}
	return n, nil
}
