package mirror

import "time"

// Metrics receives what informers measure, for a metrics system to export
// (the prometheus module implements it); InformerOptions.Metrics nil, the
// default, measures nothing. Counters and gauges are read on demand
// through a StatsSource; distributions are pushed, sampled, to the
// InformerMetrics that Informer returns.
type Metrics interface {
	// Informer is called once, when the Run of the informer named name
	// starts. src is safe to use from any goroutine until the
	// InformerMetrics returned is stopped.
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
// methods are called concurrently: they must be safe for concurrent use,
// quick, and must not call the informer.
type InformerMetrics interface {
	// Listed is called when a list completes: why, how many objects,
	// and how long from its first request to its last page or bookmark.
	Listed(cause ListCause, objects int, took time.Duration)
	// Applied is called with a sample of events' time from entering
	// the queue to being applied to the cache.
	Applied(latency time.Duration)
	// Delivered is called with a sample of the handler's notifications'
	// time from being applied to the cache to the handler's call.
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

// InformerStats is a snapshot of an informer's counters and gauges.
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
	// ApplyErrors counts changes the cache refused (*IndexError);
	// CheckpointErrors, checkpoints not loaded or written.
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
	// StuckFor is how long a call logged as stuck has lasted; else zero.
	StuckFor time.Duration
}

// Stats returns the informer's counters and gauges, cheaply, with or
// without Metrics; before Run the Reflector's counters are zero.
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
