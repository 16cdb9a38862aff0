// Package source defines what a versioned source implements for package
// mirror, as database/sql/driver does for database/sql. Most code uses an
// adapter (etcd, Kubernetes, NATS) or package memsource and never imports
// this package; import it to write a source of your own.
//
// A source implements [ListWatcher]: List returns the objects at one
// version, Watch reports every change after a version, in order, as
// [Event]s. Errors say what the mirror should do next: wrap [ErrExpired]
// (the history is gone: list again), [ErrTooLargeResourceVersion] (a
// lagging replica) or [ErrUnavailable] (retry the watch);
// mirror.ErrPermanent says the source refuses the mirror.
//
// A source may also implement these optional interfaces, each found by a
// type assertion:
//
//   - [ChunkLister]: a whole list read in one call, handed over in chunks;
//   - [StreamingListPreferrer]: asks for streaming lists (initial state as
//     watch events);
//   - [VersionComparer]: orders versions, for consistent reads
//     ([CompareDecimalVersions] orders integer revisions);
//   - [CurrentVersioner]: says the current version, for consistent reads;
//   - [ProgressRequester]: asks open watches for bookmarks.
package source
