package nats

import (
	"context"

	"github.com/listwatch/mirror/source"
)

// CompareVersions orders two revisions of the bucket; it implements
// source.VersionComparer, so that an informer of the bucket can wait for a
// version (mirror.Informer.WaitForVersion) and serve consistent reads. A
// bucket's revisions are the sequence numbers of its stream: decimal
// integers, a larger one newer, "0" for a bucket never written. Anything
// else gets an error wrapping source.ErrInvalidVersion.
func (lw *ListWatcher[V]) CompareVersions(a, b string) (int, error) {
	return source.CompareDecimalVersions(a, b)
}

// CurrentVersion returns the bucket's last revision, from its stream's
// state, as the stream's leader answers it: no older than any put,
// delete or purge whose acknowledgement the caller has received. It
// implements source.CurrentVersioner. Errors are classified as List's are.
//
// The watch covers the whole bucket and delivers every revision, so a
// mirror reaches the current revision without progress requests, which
// NATS does not have. One exception: if the last revision's message has
// since been removed (a purge of its key with nothing written after), the
// watch never delivers it, and a consistent read waits out its bound;
// give it mirror.ConsistentOptions.Fallback if that matters.
func (lw *ListWatcher[V]) CurrentVersion(ctx context.Context) (string, error) {
	_, stream, err := lw.handles(ctx)
	if err != nil {
		return "", wrapError(ctx, err, "nats: current revision of bucket %q", lw.bucket)
	}
	state, err := lw.streamState(ctx, stream)
	if err != nil {
		return "", wrapError(ctx, err, "nats: current revision of bucket %q", lw.bucket)
	}
	return formatRev(state.LastSeq), nil
}

var (
	_ source.VersionComparer  = (*ListWatcher[[]byte])(nil)
	_ source.CurrentVersioner = (*ListWatcher[[]byte])(nil)
)
