package shard

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/listwatch/mirror/memsource"
	"github.com/listwatch/mirror/source"
)

// MemoryOptions configures a Memory backend. The zero value ends leases in
// the backend, as etcd does.
type MemoryOptions struct {
	// ObserverExpiry makes the backend keep leases as Kubernetes Leases
	// are kept: a renewal rewrites the member's record, which carries its
	// TTL, and nothing ends a lease by itself; the members judge when one
	// ended and expire its record (see Lease.Expire).
	ObserverExpiry bool
}

// Memory is a Backend in the memory of one process: the members of a
// group in one process (tests, mostly) share one. Its faults are the
// remote backends': Cut makes a member's calls fail as if its connection
// were down, and CheckFence says whether a fenced write would be accepted.
// It is safe for concurrent use.
type Memory struct {
	opts MemoryOptions
	src  *memsource.Source[Record]

	mu     sync.Mutex
	leases map[string]*memLease // by member ID
	cut    map[string]bool
	denied error
}

// NewMemory returns an empty Memory backend.
func NewMemory(opts MemoryOptions) *Memory {
	return &Memory{
		opts:   opts,
		src:    memsource.New(func(r Record) (string, error) { return r.Name, nil }, memsource.Options{}),
		leases: map[string]*memLease{},
		cut:    map[string]bool{},
	}
}

// Records returns the source of the backend's records.
func (b *Memory) Records() source.ListWatcher[Record] { return b.src }

// Cut cuts member id off from the backend, or restores it: while cut, its
// lease's calls fail with an error wrapping source.ErrUnavailable, and do
// nothing.
func (b *Memory) Cut(id string, cut bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if cut {
		b.cut[id] = true
	} else {
		delete(b.cut, id)
	}
}

// Deny makes every later Join and lease call fail with err (nil restores
// the backend): a backend that refuses a member wraps
// mirror.ErrPermanent.
func (b *Memory) Deny(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.denied = err
}

// CheckFence returns nil if t is its shard's current claim, and an error
// wrapping ErrFenced if not: what a backend's fenced write checks.
func (b *Memory) CheckFence(t Token) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	cur, ok := b.src.Get(t.Record)
	if !ok || cur.Token != t.Value {
		return fmt.Errorf("shard %d, token %d: %w", t.Shard, t.Value, ErrFenced)
	}
	return nil
}

// Join starts a lease for member id.
func (b *Memory) Join(ctx context.Context, id string, ttl time.Duration) (Lease, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.refusal(id); err != nil {
		return nil, err
	}
	if old := b.leases[id]; old != nil {
		b.endLocked(old)
	}
	l := &memLease{b: b, id: id, ttl: ttl, expires: time.Now().Add(ttl)}
	rec := Record{Name: "members/" + id, Member: id, Shard: -1}
	if b.opts.ObserverExpiry {
		rec.TTL = ttl
	} else {
		l.timer = time.AfterFunc(ttl, l.check)
	}
	l.version = b.putLocked(rec).Version
	b.leases[id] = l
	return l, nil
}

// refusal returns the error a call of member id fails with, if any. Call
// with b.mu held.
func (b *Memory) refusal(id string) error {
	if b.denied != nil {
		return b.denied
	}
	if b.cut[id] {
		return fmt.Errorf("shard: member %s cut off: %w", id, source.ErrUnavailable)
	}
	return nil
}

// putLocked stores r at the next revision, which becomes its Version.
// Call with b.mu held.
func (b *Memory) putLocked(r Record) Record {
	r.Version = strconv.FormatInt(b.src.Revision()+1, 10)
	_, _ = b.src.Put(r)
	return r
}

// endLocked ends lease l: its member record and claims are removed. Call
// with b.mu held.
func (b *Memory) endLocked(l *memLease) {
	if l.ended {
		return
	}
	l.ended = true
	if l.timer != nil {
		l.timer.Stop()
	}
	if b.leases[l.id] == l {
		delete(b.leases, l.id)
	}
	for name, r := range b.src.Snapshot() {
		if r.Member == l.id {
			b.src.Delete(name)
		}
	}
}

// memLease is a lease of a Memory backend.
type memLease struct {
	b       *Memory
	id      string
	ttl     time.Duration
	expires time.Time
	timer   *time.Timer
	version string // of the member record, with ObserverExpiry
	ended   bool
}

// check ends the lease if it expired, or looks again when it will.
func (l *memLease) check() {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	if l.ended {
		return
	}
	if left := time.Until(l.expires); left > 0 {
		l.timer.Reset(left)
		return
	}
	l.b.endLocked(l)
}

// usable returns why the lease cannot be used, if it cannot. Call with
// l.b.mu held.
func (l *memLease) usable() error {
	if err := l.b.refusal(l.id); err != nil {
		return err
	}
	if l.ended {
		return fmt.Errorf("shard: member %s: %w", l.id, ErrLeaseLost)
	}
	if l.b.opts.ObserverExpiry {
		if cur, ok := l.b.src.Get("members/" + l.id); !ok || cur.Version != l.version {
			// Expired by another member: its claims stay, for the
			// others to take.
			l.ended = true
			if l.b.leases[l.id] == l {
				delete(l.b.leases, l.id)
			}
			return fmt.Errorf("shard: member %s: %w", l.id, ErrLeaseLost)
		}
	}
	return nil
}

func (l *memLease) Renew(ctx context.Context) error {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	if l.b.opts.ObserverExpiry {
		cur, _ := l.b.src.Get("members/" + l.id)
		l.version = l.b.putLocked(cur).Version
		return nil
	}
	l.expires = time.Now().Add(l.ttl)
	return nil
}

func (l *memLease) Claim(ctx context.Context, shard int, prev Record) (Record, error) {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	if err := l.usable(); err != nil {
		return Record{}, err
	}
	name := fmt.Sprintf("shards/%05d", shard)
	cur, ok := l.b.src.Get(name)
	if ok != (prev.Version != "") || ok && cur.Version != prev.Version {
		return Record{}, fmt.Errorf("shard %d: %w", shard, ErrConflict)
	}
	rec := Record{Name: name, Member: l.id, Shard: shard}
	rec.Token = l.b.src.Revision() + 1
	return l.b.putLocked(rec), nil
}

func (l *memLease) Release(ctx context.Context, claim Record) error {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	if cur, ok := l.b.src.Get(claim.Name); ok && cur.Member == l.id && cur.Token == claim.Token {
		l.b.src.Delete(claim.Name)
	}
	return nil
}

func (l *memLease) Expire(ctx context.Context, m Record) error {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	if cur, ok := l.b.src.Get(m.Name); !ok || cur.Version != m.Version {
		return fmt.Errorf("member %s: %w", m.Member, ErrConflict)
	}
	l.b.src.Delete(m.Name)
	return nil
}

func (l *memLease) Leave(ctx context.Context) error {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	if err := l.b.refusal(l.id); err != nil {
		return err
	}
	l.b.endLocked(l)
	return nil
}
