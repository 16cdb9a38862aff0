package shard_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/listwatch/mirror/shard"
	"github.com/listwatch/mirror/source"
	"github.com/stretchr/testify/require"
)

// shards is the number of shards of the group the stray test runs.
const shards = 8

// lostAnswers is a Memory backend whose member "a" makes its first claim
// of each shard but hears back an error, as a claim whose request timed
// out after the backend wrote it does; its last such claim waits until
// member "b" has joined, so that b finds every shard claimed by a.
type lostAnswers struct {
	*shard.Memory
	aClaimed chan struct{} // closed once a made every claim
	bJoined  chan struct{}
	aOnce    sync.Once
	bOnce    sync.Once
}

func (b *lostAnswers) Join(ctx context.Context, id string, ttl time.Duration) (shard.Lease, error) {
	l, err := b.Memory.Join(ctx, id, ttl)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(id, "b-") {
		b.bOnce.Do(func() { close(b.bJoined) })
	}
	return lostAnswerLease{Lease: l, b: b, id: id}, nil
}

type lostAnswerLease struct {
	shard.Lease
	b  *lostAnswers
	id string
}

func (l lostAnswerLease) Claim(ctx context.Context, s int, prev shard.Record) (shard.Record, error) {
	rec, err := l.Lease.Claim(ctx, s, prev)
	if err == nil && strings.HasPrefix(l.id, "a-") && prev.Version == "" {
		if s == shards-1 { // a's first pass goes in shard order
			l.b.aOnce.Do(func() { close(l.b.aClaimed) })
			<-l.b.bJoined
			// In the bubble, time moves once every other goroutine is
			// blocked: a's informer has seen b's record by then.
			time.Sleep(time.Second)
		}
		return shard.Record{}, fmt.Errorf("claiming shard %d: no answer: %w", s, source.ErrUnavailable)
	}
	return rec, err
}

func TestMember_ReleasesAClaimWhoseAnswerWasLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &lostAnswers{Memory: shard.NewMemory(shard.MemoryOptions{}), aClaimed: make(chan struct{}), bJoined: make(chan struct{})}
		opts := func(name string) shard.MemberOptions {
			return shard.MemberOptions{Name: name, Shards: shards, ErrorHandler: func(error) {}, Logger: slog.New(slog.DiscardHandler)}
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		run := func(m *shard.Member) chan error {
			done := make(chan error, 1)
			go func() { done <- m.Run(ctx) }()
			return done
		}

		// a claims every shard and hears back of none; by then b has
		// joined, and the shards a does not know it holds are b's to
		// claim.
		a := shard.NewMember(b, opts("a"))
		aDone := run(a)
		<-b.aClaimed
		other := shard.NewMember(b, opts("b"))
		otherDone := run(other)
		time.Sleep(time.Minute)
		synctest.Wait()
		require.NotEmpty(t, other.Held(), "b never got a shard")
		require.NotEmpty(t, a.Held(), "a never got a shard")
		require.Len(t, append(a.Held(), other.Held()...), shards)

		cancel()
		require.NoError(t, <-aDone)
		require.NoError(t, <-otherDone)
	})
}
