package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/listwatch/mirror/source"
)

// What a source needs for consistent reads (mirror.Informer.Consistent):
// an order of its versions and a way to learn the current one. The
// catalog's revisions are decimal integers, and its product list says
// which revision it is at. A source whose API can also be asked to
// confirm a watch's progress would implement source.ProgressRequester;
// this one's long polls end with a bookmark soon enough without it.
var (
	_ source.VersionComparer  = (*catalogSource)(nil)
	_ source.CurrentVersioner = (*catalogSource)(nil)
)

// CompareVersions orders two of the catalog's revisions.
func (s *catalogSource) CompareVersions(a, b string) (int, error) {
	return source.CompareDecimalVersions(a, b)
}

// CurrentVersion returns the catalog's revision. The API has no cheaper
// way to ask than listing every product; an API of one's own would offer
// one (a HEAD request, a count).
func (s *catalogSource) CurrentVersion(ctx context.Context) (string, error) {
	var page productsPage
	if err := s.get(ctx, "/products", nil, &page); err != nil {
		return "", fmt.Errorf("catalog: current revision: %w", err)
	}
	return strconv.FormatInt(page.Revision, 10), nil
}
