package memsource

import (
	"context"
	"strconv"

	"github.com/listwatch/mirror/source"
)

// CompareVersions orders two of the Source's resource versions, which are
// revisions in decimal; it implements source.VersionComparer, so an
// informer of a Source can wait for a version and serve consistent reads.
// A string that is not a revision gets an error wrapping
// source.ErrInvalidVersion.
func (s *Source[T]) CompareVersions(a, b string) (int, error) {
	return source.CompareDecimalVersions(a, b)
}

// CurrentVersion returns the revision of the newest change (see Revision)
// as a resource version; it implements source.CurrentVersioner. It fails
// only if ctx has ended; failures set by FailNext are for List and Watch.
func (s *Source[T]) CurrentVersion(ctx context.Context) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	return strconv.FormatInt(s.Revision(), 10), nil
}

// RequestProgress sends a bookmark at the current revision to every open
// watch that allows them (see Bookmark); it implements
// source.ProgressRequester.
func (s *Source[T]) RequestProgress(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.Bookmark()
	return nil
}
