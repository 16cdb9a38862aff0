package shard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/listwatch/mirror"
)

// Default lease timing of a Member, client-go's leader election's.
const (
	DefaultTTL           = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// MemberOptions configures a Member. The zero value is a member named
// after its host, of a group of DefaultShards shards, with a lease of
// DefaultTTL renewed every DefaultRetryPeriod and trusted for
// DefaultRenewDeadline after a renewal was sent.
type MemberOptions struct {
	// Name names the member in logs; its ID is Name and a random suffix,
	// new each time it joins. Empty means the host's name.
	Name string
	// Shards is the number of shards of the hash space. Every member of a
	// group must use the same. Zero means DefaultShards; one shard makes
	// the group a leader election.
	Shards int
	// TTL is the lease's time to live: how long after its last renewal a
	// member's shards may be taken. Zero means DefaultTTL.
	TTL time.Duration
	// RenewDeadline is how long after sending its last successful renewal
	// a member goes on granting work; it must be shorter than TTL, by
	// enough for the work granted to see its context end. Zero means
	// DefaultRenewDeadline, or two thirds of a TTL shorter than that.
	RenewDeadline time.Duration
	// RetryPeriod is how often the lease is renewed, one request each
	// time; it must be shorter than RenewDeadline. Zero means
	// DefaultRetryPeriod, or a fifth of a shorter RenewDeadline.
	RetryPeriod time.Duration
	// DrainTimeout is how long a shard being handed over waits for its
	// work in progress before ending that work's contexts; the shard is
	// released only once all of it has returned. Zero means
	// RenewDeadline.
	DrainTimeout time.Duration
	// ErrorHandler, if not nil, is called with each failure to reach the
	// backend (the member goes on, retrying). Nil logs them at Warn.
	ErrorHandler func(error)
	// Logger is where the member logs. Nil means slog.Default().
	Logger *slog.Logger
}

// ErrOptions is wrapped by the error Member.Run returns when its options
// are inconsistent.
var ErrOptions = errors.New("shard: invalid options")

// Member is one member of a group that divides a hash space of shards
// among its live members. It claims the shards that Assign gives it, hands
// over those it no longer should, and grants work on the keys of the
// shards it holds (see Hold) only while its lease is sure to be current.
// Make one with NewMember; it runs once, with Run. It is safe for
// concurrent use.
//
// What a group guarantees:
//   - A member claims a shard only once its previous holder released it
//     or the previous holder's lease ended at the backend.
//   - A member grants no work of a shard after its renewal deadline (the
//     send time of its last successful renewal plus RenewDeadline, on its
//     own monotonic clock), even when it cannot reach the backend, and it
//     ends the contexts of the work it granted at that deadline. So a
//     member cut off from the backend stops at least TTL−RenewDeadline
//     before another can claim its shards, and work that returns when its
//     context ends never overlaps the next holder's.
//   - A member that hands a shard over (another member joined, or Run's
//     context ended) grants no more of its work, waits for the work in
//     progress (ending its contexts after DrainTimeout) and only then
//     releases the shard, so that the next holder starts at once.
//   - A process that is frozen (SIGSTOP, a long pause of its VM) cannot be
//     stopped: work it was doing goes on when it resumes, after its shard
//     may have been claimed. It grants no new work then (its deadline has
//     passed), and the claim's Token, in the work's context, lets a write
//     be made conditional on the claim: the etcd adapter's fenced writes
//     are refused once the shard was claimed again.
type Member struct {
	b    Backend
	opts MemberOptions
	inf  *mirror.Informer[string, Record]
	log  *slog.Logger
	wake chan struct{}

	mu       sync.Mutex
	started  bool
	id       string
	lease    Lease
	lost     bool      // the lease ended: drop every claim, join again
	deadline time.Time // no work is granted from then on
	lapsed   bool      // the work's contexts were ended at the deadline
	// deadlineTimer ends the work granted at the deadline.
	deadlineTimer *time.Timer
	held          map[int]*claim
	subs          []*subscriber
	gone          []int // shards handed over or dropped, not yet told
	fatal         error // a permanent refusal by the backend
	seen          map[string]sighting
	expired       map[string]string // member records Expire was tried on, by version
	strays        map[string]string // stray claims Release was tried on, by version

	handing sync.WaitGroup // hand-overs in progress

	// Only the loop's goroutine reads and writes these.
	assignedTo []string // the live members of the last assignment
	assignment []string
}

// claim is a shard the member holds.
type claim struct {
	rec      Record
	ctx      context.Context // ends when the work granted must stop
	cancel   context.CancelFunc
	inflight int
	leaving  bool          // being handed over: no new work
	drained  chan struct{} // closed once leaving and no work in progress
}

// sighting is when a member record was first seen at a version.
type sighting struct {
	version string
	at      time.Time
}

// subscriber is a function that Subscribe registered.
type subscriber struct {
	f       func(gained, lost []int)
	initial bool // not yet told what the member holds
}

// NewMember returns a member of the group whose records b keeps. Nothing
// runs until Run.
func NewMember(b Backend, opts MemberOptions) *Member {
	if opts.Name == "" {
		opts.Name, _ = os.Hostname()
		if opts.Name == "" {
			opts.Name = "member"
		}
	}
	if opts.Shards == 0 {
		opts.Shards = DefaultShards
	}
	if opts.TTL == 0 {
		opts.TTL = DefaultTTL
	}
	if opts.RenewDeadline == 0 {
		opts.RenewDeadline = min(DefaultRenewDeadline, opts.TTL*2/3)
	}
	if opts.RetryPeriod == 0 {
		opts.RetryPeriod = min(DefaultRetryPeriod, opts.RenewDeadline/5)
	}
	if opts.DrainTimeout == 0 {
		opts.DrainTimeout = opts.RenewDeadline
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	m := &Member{
		b:       b,
		opts:    opts,
		log:     opts.Logger.With("member", opts.Name),
		wake:    make(chan struct{}, 1),
		held:    map[int]*claim{},
		seen:    map[string]sighting{},
		expired: map[string]string{},
	}
	m.inf = mirror.NewInformer(b.Records(), mirror.InformerOptions[string, Record]{
		Name:    "shard records",
		KeyFunc: func(r Record) (string, error) { return r.Name, nil },
		Logger:  opts.Logger,
	})
	return m
}

// Options returns the member's options, defaults filled in.
func (m *Member) Options() MemberOptions { return m.opts }

// ID returns the member's current ID, or "" before it first joined.
func (m *Member) ID() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.id
}

// Held returns the shards the member holds and grants work on, in order:
// none while its renewal deadline has passed.
func (m *Member) Held() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lapsed || !time.Now().Before(m.deadline) {
		return nil
	}
	var out []int
	for s, c := range m.held {
		if !c.leaving {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// Owns reports whether the member holds the shard of hash h and has not
// begun to hand it over: whether work on a key of that hash is worth
// queueing. Whether it may start is Hold's to say.
func (m *Member) Owns(h uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.held[Of(h, m.opts.Shards)]
	return c != nil && !c.leaving
}

// Hold grants work on a key of hash h, if the member holds its shard, is
// not handing it over, and its renewal deadline has not passed. It
// returns a context, derived from ctx and carrying the claim's Token,
// that ends when the member must stop the work (its deadline passed, or
// the hand-over's DrainTimeout did), and a function to call once the work
// is done, which releases the context. Without a grant, it returns false
// and the work must not start.
func (m *Member) Hold(ctx context.Context, h uint64) (context.Context, func(), bool) {
	s := Of(h, m.opts.Shards)
	m.mu.Lock()
	c := m.held[s]
	if c == nil || c.leaving || m.lapsed || !time.Now().Before(m.deadline) {
		m.mu.Unlock()
		return nil, nil, false
	}
	c.inflight++
	stopped := c.ctx
	tok := Token{Shard: s, Value: c.rec.Token, Record: c.rec.Name}
	m.mu.Unlock()

	wctx, cancel := context.WithCancel(WithToken(ctx, tok))
	unlink := context.AfterFunc(stopped, cancel)
	var once sync.Once
	return wctx, func() {
		once.Do(func() {
			unlink()
			cancel()
			m.mu.Lock()
			c.inflight--
			if c.leaving && c.inflight == 0 {
				close(c.drained)
			}
			m.mu.Unlock()
		})
	}, true
}

// Subscribe has f called with the shards the member gains and loses:
// first with those it holds, then at each change. A shard is lost when
// the member stops granting its work, before it is released. f is called
// from the member's goroutine, one call at a time, and must not block.
// The returned function ends the subscription.
func (m *Member) Subscribe(f func(gained, lost []int)) (cancel func()) {
	sub := &subscriber{f: f, initial: true}
	m.mu.Lock()
	m.subs = append(m.subs, sub)
	m.mu.Unlock()
	m.poke()
	return func() {
		m.mu.Lock()
		m.subs = slices.DeleteFunc(m.subs, func(s *subscriber) bool { return s == sub })
		m.mu.Unlock()
	}
}

// poke wakes the member's loop.
func (m *Member) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// report passes a failure to the ErrorHandler, or logs it.
func (m *Member) report(err error) {
	if m.opts.ErrorHandler != nil {
		m.opts.ErrorHandler(err)
		return
	}
	m.log.Warn("shard member", "err", err)
}

func (m *Member) validate() error {
	o := m.opts
	switch {
	case o.Shards < 1:
		return fmt.Errorf("%w: Shards %d, want at least 1", ErrOptions, o.Shards)
	case o.TTL <= 0 || o.RenewDeadline <= 0 || o.RetryPeriod <= 0 || o.DrainTimeout < 0:
		return fmt.Errorf("%w: durations must be positive", ErrOptions)
	case o.RenewDeadline >= o.TTL:
		return fmt.Errorf("%w: RenewDeadline %v must be shorter than TTL %v", ErrOptions, o.RenewDeadline, o.TTL)
	case o.RetryPeriod >= o.RenewDeadline:
		return fmt.Errorf("%w: RetryPeriod %v must be shorter than RenewDeadline %v", ErrOptions, o.RetryPeriod, o.RenewDeadline)
	}
	return nil
}

// newID returns a fresh ID for the member.
func (m *Member) newID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return m.opts.Name + "-" + hex.EncodeToString(b[:])
}
