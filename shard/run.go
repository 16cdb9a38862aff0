package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/listwatch/mirror"
)

// ErrStarted is returned by Member.Run when the member has run already.
var ErrStarted = errors.New("shard: member already started")

// Run mirrors the backend's records, joins the group and takes part in it
// until ctx ends: it renews the member's lease every RetryPeriod, claims
// the shards Assign gives it among the live members, hands over the ones
// it no longer should, and joins again, under a new ID, if its lease ends.
//
// When ctx ends, Run stops granting work, waits for the work in progress
// (ending its contexts after DrainTimeout), leaves the group (the
// backend removes its record and claims, so the others take its shards at
// once), and returns nil; no goroutine it started is left. If the backend
// refuses the member for good (the error wraps mirror.ErrPermanent: no
// permission on the records, say), Run leaves as far as it can and
// returns that error: a member is never silently idle.
func (m *Member) Run(ctx context.Context) error {
	m.mu.Lock()
	if m.started {
		m.mu.Unlock()
		return ErrStarted
	}
	m.started = true
	m.mu.Unlock()
	if err := m.validate(); err != nil {
		return err
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	infCtx, stopInf := context.WithCancel(ctx)
	defer stopInf()
	infDone := make(chan error, 1)
	wg.Go(func() { infDone <- m.inf.Run(infCtx) })
	if _, err := m.inf.AddChangeHandler(func(mirror.Change[string, Record]) { m.poke() }, mirror.HandlerOptions{Name: "shard member"}); err != nil {
		return fmt.Errorf("shard: %w", err)
	}
	if err := m.inf.WaitForSync(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("shard: reading the group's records: %w", err)
	}

	renewCtx, stopRenew := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRenew()
	timer := time.NewTimer(0)
	defer timer.Stop()
	joinBackoff := time.Duration(0)
	for {
		if err := m.fatalErr(); err != nil {
			m.leave(stopRenew)
			return err
		}
		m.mu.Lock()
		joined := m.lease != nil
		m.mu.Unlock()
		if !joined && joinBackoff == 0 {
			if err := m.join(ctx, renewCtx, &wg); err != nil {
				if ctx.Err() != nil {
					break
				}
				if errors.Is(err, mirror.ErrPermanent) {
					return fmt.Errorf("shard: joining: %w", err)
				}
				m.report(fmt.Errorf("shard: joining: %w", err))
				joinBackoff = m.opts.RetryPeriod
			}
		}
		next := m.step(ctx)
		if joinBackoff > 0 && (next == 0 || joinBackoff < next) {
			next = joinBackoff
		}
		if next > 0 {
			timer.Reset(next)
		}
		select {
		case <-ctx.Done():
		case <-m.wake:
		case <-timer.C:
			joinBackoff = 0
		case err := <-infDone:
			if ctx.Err() == nil {
				m.leave(stopRenew)
				return fmt.Errorf("shard: reading the group's records: %w", err)
			}
		}
		if ctx.Err() != nil {
			break
		}
	}
	m.leave(stopRenew)
	return nil
}

// armLocked sets the timer that ends the work granted at the renewal
// deadline. The timer, not the member's loop, ends it: the loop may be
// waiting on a backend that does not answer. Call with m.mu held.
func (m *Member) armLocked() {
	if m.deadlineTimer == nil {
		m.deadlineTimer = time.AfterFunc(time.Until(m.deadline), func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.lease != nil && !time.Now().Before(m.deadline) {
				m.lapseLocked()
			}
		})
		return
	}
	m.deadlineTimer.Reset(time.Until(m.deadline))
}

// lapseLocked ends the work granted, once the renewal deadline has passed:
// no more is granted until a renewal succeeds. Call with m.mu held.
func (m *Member) lapseLocked() {
	if m.lapsed {
		return
	}
	m.lapsed = true
	m.log.Warn("shard member missed its renewal deadline; work stopped until a renewal succeeds", "id", m.id)
	for _, c := range m.held {
		c.cancel()
	}
	m.poke()
}

// fatalErr returns the backend's permanent refusal, if any.
func (m *Member) fatalErr() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fatal
}

// join joins the group under a new ID and starts renewing the lease.
func (m *Member) join(ctx, renewCtx context.Context, wg *sync.WaitGroup) error {
	id := m.newID()
	start := time.Now()
	jctx, cancel := context.WithTimeout(ctx, m.opts.RenewDeadline)
	lease, err := m.b.Join(jctx, id, m.opts.TTL)
	cancel()
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.id, m.lease, m.lost, m.lapsed = id, lease, false, false
	m.deadline = start.Add(m.opts.RenewDeadline)
	m.armLocked()
	m.mu.Unlock()
	m.log.Debug("shard member joined", "id", id)
	wg.Go(func() { m.renew(renewCtx, lease) })
	return nil
}

// renew renews lease every RetryPeriod until ctx ends or the lease ends.
func (m *Member) renew(ctx context.Context, lease Lease) {
	tick := time.NewTicker(m.opts.RetryPeriod)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, m.opts.RetryPeriod)
		err := lease.Renew(rctx)
		cancel()
		m.mu.Lock()
		if m.lease != lease {
			m.mu.Unlock()
			return
		}
		switch {
		case err == nil:
			if d := start.Add(m.opts.RenewDeadline); d.After(m.deadline) {
				m.deadline = d
				m.armLocked()
			}
		case errors.Is(err, ErrLeaseLost):
			m.lost = true
		case errors.Is(err, mirror.ErrPermanent):
			m.fatal = fmt.Errorf("shard: renewing: %w", err)
		}
		m.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			m.report(fmt.Errorf("shard: renewing the lease of %s: %w", m.ID(), err))
		}
		if err == nil || errors.Is(err, ErrLeaseLost) || errors.Is(err, mirror.ErrPermanent) {
			m.poke()
		}
		if err != nil && (errors.Is(err, ErrLeaseLost) || errors.Is(err, mirror.ErrPermanent)) {
			return
		}
	}
}

// view is what the records say, as one member sees them.
type view struct {
	live    []string          // IDs of the members whose leases stand
	members map[string]Record // member records by ID, live or not
	stale   []Record          // member records judged ended, to expire
	claims  map[int]Record    // claim records by shard
	next    time.Duration     // until a member record may be judged ended
}

// look reads the records. Call with m.mu held.
func (m *Member) look(now time.Time) view {
	v := view{members: map[string]Record{}, claims: map[int]Record{}}
	names := map[string]bool{}
	for _, r := range m.inf.List() { // one snapshot: All is not one
		if !r.IsMember() {
			if r.Shard < m.opts.Shards {
				v.claims[r.Shard] = r
			}
			continue
		}
		v.members[r.Member] = r
		names[r.Name] = true
		if r.TTL <= 0 || r.Member == m.id {
			v.live = append(v.live, r.Member)
			continue
		}
		s, ok := m.seen[r.Name]
		if !ok || s.version != r.Version {
			s = sighting{version: r.Version, at: now}
			m.seen[r.Name] = s
		}
		if left := r.TTL - now.Sub(s.at); left > 0 {
			v.live = append(v.live, r.Member)
			if v.next == 0 || left < v.next {
				v.next = left
			}
		} else {
			v.stale = append(v.stale, r)
		}
	}
	for name := range m.seen {
		if !names[name] {
			delete(m.seen, name)
		}
	}
	if m.id != "" && !slices.Contains(v.live, m.id) {
		v.live = append(v.live, m.id)
	}
	return v
}

// step brings the member's claims in line with the records, and returns
// how long until it must look again without being woken (0: no need).
func (m *Member) step(ctx context.Context) time.Duration {
	now := time.Now()
	m.mu.Lock()
	lease := m.lease
	if m.lost {
		m.log.Warn("shard member lost its lease; joining again", "id", m.id)
		m.dropAll()
		m.lease, m.lost = nil, false
		lease = nil
		m.poke()
	}
	var wait time.Duration
	if lease != nil {
		if !now.Before(m.deadline) {
			m.lapseLocked()
		} else {
			if m.lapsed {
				m.lapsed = false
				for _, c := range m.held {
					c.ctx, c.cancel = context.WithCancel(context.Background())
				}
			}
			wait = m.deadline.Sub(now)
		}
	}
	v := m.look(now)
	lapsed := m.lapsed
	m.mu.Unlock()
	if v.next > 0 && (wait == 0 || v.next < wait) {
		wait = v.next
	}

	var gained []int
	if lease != nil {
		for _, r := range v.stale {
			m.expire(ctx, lease, r)
		}
		target := m.assign(v.live)
		var claims []pending
		for s, owner := range target {
			m.mu.Lock()
			c := m.held[s]
			m.mu.Unlock()
			if owner != m.id {
				if c != nil && !c.leaving {
					m.handOver(s, c)
				} else if prev, ok := v.claims[s]; c == nil && ok && prev.Member == m.id {
					m.releaseStray(ctx, lease, prev)
				}
				continue
			}
			if c != nil || lapsed {
				continue
			}
			prev, ok := v.claims[s]
			if ok && prev.Member != "" && prev.Member != m.id {
				if _, alive := v.members[prev.Member]; alive {
					continue // released or expired later: a change wakes us
				}
			}
			if !ok {
				prev = Record{}
			}
			claims = append(claims, pending{s, prev})
		}
		gained = m.claimAll(ctx, lease, claims)
	}
	m.tell(gained)
	return wait
}

// pending is a shard to claim from the claim record seen.
type pending struct {
	shard int
	prev  Record
}

// maxClaims bounds the claims a member has in flight at once: a member
// that takes over many shards (a first split, a member gone) claims them
// in about one round trip per maxClaims shards, not one per shard.
const maxClaims = 16

// claimAll claims the shards of ps, maxClaims at a time, and returns
// those it claimed, in order.
func (m *Member) claimAll(ctx context.Context, lease Lease, ps []pending) []int {
	won := make([]bool, len(ps))
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxClaims)
	for i, p := range ps {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			won[i] = m.claim(ctx, lease, p.shard, p.prev)
		})
	}
	wg.Wait()
	var gained []int
	for i, p := range ps {
		if won[i] {
			gained = append(gained, p.shard)
		}
	}
	return gained
}

// assign returns Assign(live), computed again only when the set of live
// members changed: most wake-ups (a renewal, a claim) leave it as it was.
func (m *Member) assign(live []string) []string {
	slices.Sort(live)
	if !slices.Equal(live, m.assignedTo) {
		m.assignedTo = slices.Clone(live)
		m.assignment = Assign(live, m.opts.Shards)
	}
	return m.assignment
}

// claim claims shard s from prev, and reports whether it did.
func (m *Member) claim(ctx context.Context, lease Lease, s int, prev Record) bool {
	cctx, cancel := context.WithTimeout(ctx, m.opts.RetryPeriod)
	rec, err := lease.Claim(cctx, s, prev)
	cancel()
	if err != nil {
		m.failed(lease, err, fmt.Sprintf("claiming shard %d", s))
		return false
	}
	c := &claim{rec: rec, drained: make(chan struct{})}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lease != lease || m.lost {
		c.cancel()
		return false
	}
	m.held[s] = c
	return true
}

// releaseStray releases r, a claim of this member that it does not hold:
// a Claim whose answer was lost (its request timed out after the backend
// made it) leaves one, on which no work was granted. Left alone, it would
// keep the shard from its owner for as long as this member's lease
// stands. It is tried once per version of r, again if the Release failed.
func (m *Member) releaseStray(ctx context.Context, lease Lease, r Record) {
	m.mu.Lock()
	if m.strays == nil {
		m.strays = map[string]string{}
	}
	tried := m.strays[r.Name] == r.Version
	m.strays[r.Name] = r.Version
	m.mu.Unlock()
	if tried {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, m.opts.RetryPeriod)
	err := lease.Release(rctx, r)
	cancel()
	if err != nil {
		m.mu.Lock()
		delete(m.strays, r.Name)
		m.mu.Unlock()
		m.failed(lease, err, fmt.Sprintf("releasing stray claim of shard %d", r.Shard))
	}
}

// expire fences out a member judged ended, once per version of its record.
func (m *Member) expire(ctx context.Context, lease Lease, r Record) {
	m.mu.Lock()
	tried := m.expired[r.Name] == r.Version
	m.expired[r.Name] = r.Version
	m.mu.Unlock()
	if tried {
		return
	}
	ectx, cancel := context.WithTimeout(ctx, m.opts.RetryPeriod)
	err := lease.Expire(ectx, r)
	cancel()
	if err != nil {
		m.failed(lease, err, "expiring member "+r.Member)
		return
	}
	m.log.Info("shard member expired a member whose lease ended", "id", m.id, "expired", r.Member)
}

// failed handles a failed call to the backend.
func (m *Member) failed(lease Lease, err error, what string) {
	switch {
	case errors.Is(err, ErrConflict):
		return // the records changed: their change wakes the loop
	case errors.Is(err, ErrLeaseLost):
		m.mu.Lock()
		if m.lease == lease {
			m.lost = true
		}
		m.mu.Unlock()
		m.poke()
	case errors.Is(err, mirror.ErrPermanent):
		m.mu.Lock()
		m.fatal = fmt.Errorf("shard: %s: %w", what, err)
		m.mu.Unlock()
		m.poke()
	}
	m.report(fmt.Errorf("shard: member %s: %s: %w", m.ID(), what, err))
}

// handOver stops granting work of shard s, and releases it once the work
// in progress has returned.
func (m *Member) handOver(s int, c *claim) {
	m.mu.Lock()
	m.startLeaving(s, c)
	lease := m.lease
	m.mu.Unlock()
	m.handing.Go(func() {
		m.drain(c)
		rctx, cancel := context.WithTimeout(context.Background(), m.opts.RetryPeriod)
		err := lease.Release(rctx, c.rec)
		cancel()
		if err != nil {
			m.failed(lease, err, fmt.Sprintf("releasing shard %d", s))
		}
		m.mu.Lock()
		if m.held[s] == c {
			delete(m.held, s)
		}
		m.mu.Unlock()
		m.poke()
	})
}

// startLeaving marks c as being handed over. Call with m.mu held.
func (m *Member) startLeaving(s int, c *claim) {
	if c.leaving {
		return
	}
	c.leaving = true
	m.gone = append(m.gone, s)
	if c.inflight == 0 {
		close(c.drained)
	}
}

// drain waits for c's work in progress, ending its contexts after
// DrainTimeout.
func (m *Member) drain(c *claim) {
	t := time.NewTimer(m.opts.DrainTimeout)
	defer t.Stop()
	select {
	case <-c.drained:
	case <-t.C:
		m.mu.Lock()
		c.cancel()
		m.mu.Unlock()
		<-c.drained
	}
	m.mu.Lock()
	c.cancel()
	m.mu.Unlock()
}

// dropAll forgets every claim at once, ending its work's contexts: the
// lease has ended, so the claims may be someone else's already. Call with
// m.mu held.
func (m *Member) dropAll() {
	for s, c := range m.held {
		m.startLeaving(s, c)
		c.cancel()
		delete(m.held, s)
	}
}

// tell passes the shards gained and lost to the subscribers.
func (m *Member) tell(gained []int) {
	m.mu.Lock()
	lost := m.gone
	m.gone = nil
	subs := slices.Clone(m.subs)
	var held []int
	for s, c := range m.held {
		if !c.leaving {
			held = append(held, s)
		}
	}
	var fresh []*subscriber
	for _, sub := range subs {
		if sub.initial {
			sub.initial = false
			fresh = append(fresh, sub)
		}
	}
	m.mu.Unlock()
	slices.Sort(held)
	slices.Sort(lost)
	for _, sub := range subs {
		switch {
		case slices.Contains(fresh, sub):
			if len(held) > 0 {
				sub.f(held, nil)
			}
		case len(gained) > 0 || len(lost) > 0:
			sub.f(gained, lost)
		}
	}
}

// leave hands over every shard, waits for their work, and leaves the
// group.
func (m *Member) leave(stopRenew func()) {
	m.mu.Lock()
	lease := m.lease
	var claims []*claim
	for s, c := range m.held {
		m.startLeaving(s, c)
		claims = append(claims, c)
	}
	m.mu.Unlock()
	m.tell(nil)
	for _, c := range claims {
		m.drain(c)
	}
	m.handing.Wait()
	stopRenew()
	if lease != nil {
		lctx, cancel := context.WithTimeout(context.Background(), m.opts.RenewDeadline)
		if err := lease.Leave(lctx); err != nil {
			m.report(fmt.Errorf("shard: member %s: leaving: %w", m.ID(), err))
		}
		cancel()
	}
	m.mu.Lock()
	for s, c := range m.held {
		c.cancel()
		delete(m.held, s)
	}
	m.lease = nil
	if m.deadlineTimer != nil {
		m.deadlineTimer.Stop()
	}
	m.mu.Unlock()
	m.log.Debug("shard member left", "id", m.ID())
}
