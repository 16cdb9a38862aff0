package mirror

import "time"

// Metrics receives what informers measure as they work, for a metrics
// system to export; the prometheus module in this repository implements
// it. Give it to an informer in InformerOptions.Metrics: nil, the default,
// measures nothing and costs nothing.
//
// An informer calls Informer once, when its Run starts. Counters and
// gauges are read when the metrics system asks, through the StatsSource
// given to Informer, so they cost the informer nothing more than
// the atomic counters it keeps anyway; distributions (latencies, list
// sizes) are pushed to the InformerMetrics that Informer returns, latencies
// sampled so that no event pays for a clock read of its own.
type Metrics interface {
	// Informer is called when the Run of the informer named name starts.
	// src reads the informer's counters, gauges and freshness as of the
	// call; it is safe to use from any goroutine, until the
	// InformerMetrics returned is stopped, and cheap enough for every
	// scrape.
	Informer(name string, src StatsSource) InformerMetrics
}

// StatsSource is what a Metrics implementation reads of a running
// informer; *Informer implements it.
type StatsSource interface {
	// Stats returns the informer's counters and gauges.
	Stats() InformerStats
	// Freshness returns how current the informer's cache is known to be.
	Freshness() Freshness
}

// InformerMetrics receives one running informer's distributions. Its
// methods are called from the informer's goroutines, concurrently: they
// must be safe for concurrent use and quick, and must not call the
// informer.
type InformerMetrics interface {
	// Listed is called when a list completes: why it was made, how many
	// objects it held and how long it took, from its first request to
	// its last page (or, for a streaming list, to its closing bookmark).
	Listed(cause ListCause, objects int, took time.Duration)
	// Applied is called with the time from an event's arrival in the
	// informer's queue (the Reflector handing it over) to the informer
	// applying it to its cache, for a sample of the events.
	Applied(latency time.Duration)
	// Delivered is called with the time from the informer applying a
	// change to a handler being called with it, for a sample of the
	// notifications of the handler named handler.
	Delivered(handler string, latency time.Duration)
	// Stop is called when Run returns; nothing is called after it.
	Stop()
}

// ListCause says why a Reflector listed its source.
type ListCause uint8

const (
	// ListInitial is the first list of a Run.
	ListInitial ListCause = iota + 1
	// ListExpired is a relist because the source no longer had the
	// version to watch or list from (ErrExpired, or
	// ErrTooLargeResourceVersion).
	ListExpired
	// ListAfterError is a relist after a watch failed in another way.
	ListAfterError
)

// String returns the cause's name as a metric label uses it: "initial",
// "expired" or "error".
func (c ListCause) String() string {
	switch c {
	case ListInitial:
		return "initial"
	case ListExpired:
		return "expired"
	case ListAfterError:
		return "error"
	}
	return "unknown"
}

// InformerStats is a snapshot of an informer's counters and gauges (see
// Informer.Stats).
type InformerStats struct {
	// Reflector holds the Reflector's counters: lists, relists and watch
	// restarts by cause, errors by kind.
	Reflector ReflectorStats
	// Objects is the number of objects in the cache.
	Objects int
	// QueueDepth is the number of entries waiting in the queue between
	// the Reflector and the cache: changes, list chunks, resyncs.
	QueueDepth int
	// QueueAdds counts the entries ever queued.
	QueueAdds int64
	// Handlers are the registered handlers, in registration order.
	Handlers []HandlerStats
	// ApplyErrors counts the changes the cache refused (an index function
	// that failed: *IndexError); CheckpointErrors the checkpoints that
	// could not be loaded or written (*CheckpointError). The Reflector's
	// errors are in Reflector, the handlers' panics in Handlers.
	ApplyErrors, CheckpointErrors int64
}

// HandlerStats is one handler's part of InformerStats.
type HandlerStats struct {
	// Name is the handler's HandlerOptions.Name.
	Name string
	// Backlog is the number of notifications waiting for the handler.
	Backlog int
	// Delivered counts the notifications handed to the handler.
	Delivered int64
	// Panics counts the handler's calls that panicked.
	Panics int64
	// StuckFor is how long the handler's call in progress has lasted,
	// once it has been logged as stuck (see HandlerOptions.StuckAfter);
	// zero otherwise.
	StuckFor time.Duration
}

// Stats returns the informer's counters and gauges. It is safe for
// concurrent use, cheap enough for every scrape of a metrics system, and
// works whether or not the informer was given Metrics; before Run, the
// Reflector's counters are zero. How current the cache is, is told by
// Freshness.
func (inf *Informer[K, T]) Stats() InformerStats {
	s := InformerStats{
		Objects:  inf.cache.Len(),
		Handlers: inf.proc.handlerStats(),

		ApplyErrors:      inf.applyErrors.Load(),
		CheckpointErrors: inf.checkpointErrors.Load(),
	}
	if r := inf.reflector.Load(); r != nil {
		s.Reflector = r.Stats()
	}
	s.QueueDepth, s.QueueAdds = inf.queue.stats()
	return s
}

// appliedVersion returns the source's version the cache is at: that of
// the last change, list or bookmark applied.
func (inf *Informer[K, T]) appliedVersion() string {
	inf.applyMu.Lock()
	defer inf.applyMu.Unlock()
	return inf.appliedRV
}
