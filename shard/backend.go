package shard

import (
	"context"
	"errors"
	"time"

	"github.com/listwatch/mirror/source"
)

// Backend is where the members of a group keep their leases and their
// claims on shards: an etcd prefix, a namespace's Kubernetes Leases, or
// the memory of one process (see Memory).
//
// A backend keeps two kinds of Record: one per member, written when it
// joins and removed when it leaves or its lease ends, and one per claimed
// shard, naming the member that holds it. Members learn both by mirroring
// Records with an informer, so a backend's writes must reach that source
// in the order they were made.
type Backend interface {
	// Records returns the source of the backend's records, for an
	// informer keyed by Record.Name.
	Records() source.ListWatcher[Record]
	// Join starts a lease for a member with the given ID, lasting ttl
	// from each renewal, writes the member's record, and returns the
	// lease.
	Join(ctx context.Context, id string, ttl time.Duration) (Lease, error)
}

// Lease is one member's lease at a Backend, from Join until it ends. Its
// methods may be called concurrently: a member renews while it claims and
// releases, and claims several shards at once.
type Lease interface {
	// Renew renews the lease. When it returns nil, the backend will not
	// end the lease, nor let another member take its claims, before the
	// lease's ttl has passed since Renew was called. It returns an error
	// wrapping ErrLeaseLost if the lease has ended: its claims may have
	// been taken, and the member must join again.
	Renew(ctx context.Context) error
	// Claim claims shard for the lease's member, provided the shard's
	// claim record is still prev: a prev with an empty Version means the
	// shard has no record. It returns the new claim, whose Token is the
	// claim's fencing token, or an error wrapping ErrConflict if the
	// record is no longer prev.
	Claim(ctx context.Context, shard int, prev Record) (Record, error)
	// Release gives up a claim the lease made, if it still stands, so
	// that another member can claim the shard at once.
	Release(ctx context.Context, claim Record) error
	// Expire removes the record of a member whose lease the caller judged
	// ended (a member record with a TTL that has not changed for that
	// long), provided it is still at m.Version, so that the member's
	// renewals fail from then on and its claims can be taken. It returns
	// an error wrapping ErrConflict if the record changed. Backends that
	// end leases themselves (their member records have no TTL) never get
	// this call.
	Expire(ctx context.Context, m Record) error
	// Leave ends the lease: the member's record and its claims are
	// removed.
	Leave(ctx context.Context) error
}

// Record is one entry of a Backend: a member's record or a shard's claim.
type Record struct {
	// Name is the record's name at the backend, its key in an informer:
	// the same for every version of one member's record or one shard's
	// claim.
	Name string
	// Member is the member's ID in a member record, and the holder's ID
	// in a claim ("" once released).
	Member string
	// Shard is the claimed shard, or -1 in a member record.
	Shard int
	// Token is a claim's fencing token: a later claim of the shard has a
	// larger one.
	Token int64
	// Version is the record's version at the backend, compared by Claim
	// and Expire.
	Version string
	// TTL, in a member record, is the member's lease time where the
	// members judge when a lease ended: it ended once its record has not
	// changed for TTL by the observer's clock (a Kubernetes Lease). Zero
	// means the backend ends leases itself, removing their records (an
	// etcd lease).
	TTL time.Duration
}

// IsMember reports whether r is a member record.
func (r Record) IsMember() bool { return r.Shard < 0 }

var (
	// ErrConflict is wrapped by the errors of a Lease's Claim and Expire
	// when the record changed since the caller read it.
	ErrConflict = errors.New("shard: record changed")
	// ErrLeaseLost is wrapped by the error of Renew, and of the other
	// calls of a Lease, once the lease has ended.
	ErrLeaseLost = errors.New("shard: lease lost")
	// ErrFenced is wrapped by the error of a write made with a Token that
	// is no longer its shard's current claim.
	ErrFenced = errors.New("shard: fencing token superseded")
)
