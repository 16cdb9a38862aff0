package k8s

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/shard"
	"github.com/listwatch/mirror/source"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// The labels of a shard group's Leases.
const (
	// ShardGroupLabel names the group a Lease belongs to (see
	// NewShardBackend for its value).
	ShardGroupLabel = "mirror.listwatch.io/shard-group"
	// ShardKindLabel says what a group's Lease is: "member" for a
	// member's lease, "claim" for a shard's claim.
	ShardKindLabel = "mirror.listwatch.io/shard-kind"
	// ShardLabel, on a claim, is the claimed shard, in decimal.
	ShardLabel = "mirror.listwatch.io/shard"
)

const (
	kindMember = "member"
	kindClaim  = "claim"
)

// ShardBackend is a shard.Backend on coordination.k8s.io/v1 Leases in one
// namespace, for one group: the members of a group (replicas of one
// controller, each with a shard.Member) share it through the API server,
// as client-go's leader election shares one Lease.
//
// Each member has a Lease of its own, named after a hash of its ID, whose
// holderIdentity is the member's ID, leaseDurationSeconds its TTL
// (rounded up to a whole second) and renewTime the time of its last
// renewal; a renewal is one Update of that Lease at the resource version
// the member wrote last, so a Lease another member expired (deleted)
// cannot be renewed. The members judge when a lease ended, each by its
// own clock, as client-go's leader election does: the member records
// carry their TTL (shard.Record.TTL), and a record unchanged for that
// long is expired with a Delete conditional on its resource version.
//
// Each shard claimed once has a Lease, "<group>-shard-<n>", whose
// holderIdentity is the member that holds it ("" once released) and
// whose leaseTransitions counts its claims: it is the claim's fencing
// token (shard.Token), and grows as long as the Lease is not deleted
// (the backend never deletes one). A claim is a Create, or an Update at
// the resource version of the claim the member saw; a release is an
// Update that empties holderIdentity. Record.Version is a Lease's
// resource version.
//
// Every Lease of the group carries ShardGroupLabel and ShardKindLabel;
// Records mirrors them with a ListWatcher of this package. The group's
// name is used as it is in Lease names and labels if it is a DNS-1123
// label of at most 40 characters, and as a hash of it otherwise.
//
// The client needs get, list, watch, create, update and delete on
// leases in the namespace. A refusal (401 Unauthorized, 403 Forbidden) or
// a request the server finds invalid wraps mirror.ErrPermanent, so that
// shard.Member.Run fails with it; other failures wrap
// source.ErrUnavailable. A ShardBackend is safe for concurrent use.
type ShardBackend struct {
	leases  coordinationv1client.LeaseInterface
	ns      string
	group   string // as given, for errors
	label   string // the value of ShardGroupLabel
	prefix  string // of the Lease names
	records *leaseRecords
}

var _ shard.Backend = (*ShardBackend)(nil)

// NewShardBackend returns the backend of the group named group, on the
// Leases of namespace that client reaches.
func NewShardBackend(client kubernetes.Interface, namespace, group string) *ShardBackend {
	leases := client.CoordinationV1().Leases(namespace)
	name := group
	if len(validation.IsDNS1123Label(group)) > 0 || len(group) > 40 {
		name = fmt.Sprintf("g%016x", shard.Hash(group))
	}
	b := &ShardBackend{leases: leases, ns: namespace, group: group, label: name, prefix: name}
	lw := New[*coordinationv1.Lease](leases.List, leases.Watch, Options{LabelSelector: ShardGroupLabel + "=" + name})
	lw.resource = "coordination.k8s.io/v1/leases in " + namespace
	b.records = &leaseRecords{lw: lw}
	return b
}

// Records returns the source of the group's records: a ListWatcher of
// its Leases (see New), each read as a shard.Record. A Lease of the group
// that is not a valid record (a missing holder, shard or duration) is
// reported as an *mirror.ObjectError and skipped.
func (b *ShardBackend) Records() source.ListWatcher[shard.Record] { return b.records }

// MemberLeaseName returns the name of the Lease of the member with that
// ID.
func (b *ShardBackend) MemberLeaseName(id string) string {
	return fmt.Sprintf("%s-member-%016x", b.prefix, shard.Hash(id))
}

// ClaimLeaseName returns the name of the Lease of shard s's claims.
func (b *ShardBackend) ClaimLeaseName(s int) string {
	return fmt.Sprintf("%s-shard-%d", b.prefix, s)
}

// Join creates the member's Lease.
func (b *ShardBackend) Join(ctx context.Context, id string, ttl time.Duration) (shard.Lease, error) {
	secs := int32(min(math.MaxInt32, (ttl+time.Second-1)/time.Second))
	if secs < 1 {
		return nil, fmt.Errorf("k8s: shard group %q: join: ttl %v: %w", b.group, ttl, mirror.ErrPermanent)
	}
	l := &shardLease{b: b, id: id, name: b.MemberLeaseName(id), ttl: secs, claims: map[int]shard.Record{}}
	now := metav1.NowMicro()
	l.acquired = now
	created, err := b.leases.Create(ctx, l.memberLease("", now), metav1.CreateOptions{})
	if err != nil {
		return nil, b.fail(ctx, err, "join as %s (lease %s)", id, l.name)
	}
	l.rv = created.ResourceVersion
	return l, nil
}

// fail describes err, from a request about the group's Leases, and
// classifies it: a refusal wraps mirror.ErrPermanent, anything else
// source.ErrUnavailable.
func (b *ShardBackend) fail(ctx context.Context, err error, format string, args ...any) error {
	what := fmt.Sprintf("k8s: shard group %q in %s: ", b.group, b.ns) + fmt.Sprintf(format, args...)
	kind := source.ErrUnavailable
	if apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
		kind = mirror.ErrPermanent
	}
	return fmt.Errorf("%s: %w: %w", what, kind, err)
}

// groupLabels returns the labels of a Lease of the group of that kind.
func (b *ShardBackend) groupLabels(kind string) map[string]string {
	return map[string]string{ShardGroupLabel: b.label, ShardKindLabel: kind}
}

// shardLease is a member's lease at a ShardBackend.
type shardLease struct {
	b        *ShardBackend
	id       string
	name     string // of the member's Lease
	ttl      int32
	acquired metav1.MicroTime

	mu     sync.Mutex
	rv     string               // of the member's Lease, as last written
	claims map[int]shard.Record // the claims the lease made that may stand
	lost   bool                 // the member's Lease was found gone or changed
}

// memberLease returns the member's Lease at resource version rv ("" to
// create it), renewed at now.
func (l *shardLease) memberLease(rv string, now metav1.MicroTime) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: l.name, Namespace: l.b.ns, ResourceVersion: rv, Labels: l.b.groupLabels(kindMember)},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       &l.id,
			LeaseDurationSeconds: &l.ttl,
			AcquireTime:          &l.acquired,
			RenewTime:            &now,
		},
	}
}

// lostError is the error of a call on a lease that has ended.
func (l *shardLease) lostError(err error) error {
	if err == nil {
		return fmt.Errorf("k8s: shard group %q: member %s (lease %s): %w", l.b.group, l.id, l.name, shard.ErrLeaseLost)
	}
	return fmt.Errorf("k8s: shard group %q: member %s (lease %s): %w: %w", l.b.group, l.id, l.name, shard.ErrLeaseLost, err)
}

// Renew updates the member's Lease at the resource version it wrote last.
// A conflict or a missing Lease (another member expired it) wraps
// shard.ErrLeaseLost.
func (l *shardLease) Renew(ctx context.Context) error {
	l.mu.Lock()
	rv, lost := l.rv, l.lost
	l.mu.Unlock()
	if lost {
		return l.lostError(nil)
	}
	updated, err := l.b.leases.Update(ctx, l.memberLease(rv, metav1.NowMicro()), metav1.UpdateOptions{})
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		l.rv = updated.ResourceVersion
		return nil
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		l.lost = true
		return l.lostError(err)
	}
	return l.b.fail(ctx, err, "renew the lease of %s (lease %s)", l.id, l.name)
}

// claimLease returns shard s's claim Lease held by the lease's member at
// resource version rv ("" to create it), claimed for the transitions-th
// time.
func (l *shardLease) claimLease(s int, rv string, holder string, transitions int32, acquired metav1.MicroTime) *coordinationv1.Lease {
	labels := l.b.groupLabels(kindClaim)
	labels[ShardLabel] = strconv.Itoa(s)
	now := metav1.NowMicro()
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: l.b.ClaimLeaseName(s), Namespace: l.b.ns, ResourceVersion: rv, Labels: labels},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:   &holder,
			AcquireTime:      &acquired,
			RenewTime:        &now,
			LeaseTransitions: &transitions,
		},
	}
}

// Claim creates shard s's claim Lease (prev has no Version) or updates it
// at prev's resource version, with the member as holder and one more
// transition. A Lease that exists already, changed or is gone wraps
// shard.ErrConflict.
func (l *shardLease) Claim(ctx context.Context, s int, prev shard.Record) (shard.Record, error) {
	l.mu.Lock()
	lost := l.lost
	l.mu.Unlock()
	if lost {
		return shard.Record{}, l.lostError(nil)
	}
	if prev.Token >= math.MaxInt32 {
		return shard.Record{}, fmt.Errorf("k8s: shard group %q: claim shard %d: %d transitions: %w", l.b.group, s, prev.Token, mirror.ErrPermanent)
	}
	lease := l.claimLease(s, prev.Version, l.id, int32(prev.Token)+1, metav1.NowMicro())
	var got *coordinationv1.Lease
	var err error
	if prev.Version == "" {
		got, err = l.b.leases.Create(ctx, lease, metav1.CreateOptions{})
	} else {
		got, err = l.b.leases.Update(ctx, lease, metav1.UpdateOptions{})
	}
	switch {
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err), apierrors.IsNotFound(err):
		return shard.Record{}, fmt.Errorf("k8s: shard group %q: claim shard %d: %w: %w", l.b.group, s, shard.ErrConflict, err)
	case err != nil:
		return shard.Record{}, l.b.fail(ctx, err, "claim shard %d (lease %s)", s, lease.Name)
	}
	rec, err := recordOf(got)
	if err != nil {
		return shard.Record{}, fmt.Errorf("k8s: shard group %q: claim shard %d: %w", l.b.group, s, err)
	}
	l.mu.Lock()
	l.claims[s] = rec
	l.mu.Unlock()
	return rec, nil
}

// Release updates the claim's Lease, at the claim's resource version, to
// hold no one. A claim that no longer stands (the Lease changed or is
// gone) is left alone.
func (l *shardLease) Release(ctx context.Context, claim shard.Record) error {
	if err := l.release(ctx, claim); err != nil {
		return err
	}
	l.mu.Lock()
	if cur, ok := l.claims[claim.Shard]; ok && cur.Version == claim.Version {
		delete(l.claims, claim.Shard)
	}
	l.mu.Unlock()
	return nil
}

func (l *shardLease) release(ctx context.Context, claim shard.Record) error {
	if claim.Token > math.MaxInt32 || claim.Token < 0 {
		return nil // not a claim of this backend
	}
	lease := l.claimLease(claim.Shard, claim.Version, "", int32(claim.Token), metav1.NowMicro())
	_, err := l.b.leases.Update(ctx, lease, metav1.UpdateOptions{})
	switch {
	case err == nil, apierrors.IsConflict(err), apierrors.IsNotFound(err):
		return nil
	}
	return l.b.fail(ctx, err, "release shard %d (lease %s)", claim.Shard, lease.Name)
}

// Expire deletes the member Lease of m, provided it is still at
// m.Version; otherwise the error wraps shard.ErrConflict.
func (l *shardLease) Expire(ctx context.Context, m shard.Record) error {
	err := l.b.leases.Delete(ctx, m.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &m.Version}})
	switch {
	case err == nil:
		return nil
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		return fmt.Errorf("k8s: shard group %q: expire member %s: %w: %w", l.b.group, m.Member, shard.ErrConflict, err)
	}
	return l.b.fail(ctx, err, "expire member %s (lease %s)", m.Member, m.Name)
}

// Leave releases the member's claims that still stand, then deletes its
// Lease. It returns the first error; a Lease already gone is no error.
func (l *shardLease) Leave(ctx context.Context) error {
	l.mu.Lock()
	claims := make([]shard.Record, 0, len(l.claims))
	for _, c := range l.claims {
		claims = append(claims, c)
	}
	l.lost = true
	l.mu.Unlock()
	var errs []error
	for _, c := range claims {
		if err := l.release(ctx, c); err != nil {
			errs = append(errs, err)
			continue
		}
		l.mu.Lock()
		delete(l.claims, c.Shard)
		l.mu.Unlock()
	}
	err := l.b.leases.Delete(ctx, l.name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, l.b.fail(ctx, err, "leave as %s (lease %s)", l.id, l.name))
	}
	return errors.Join(errs...)
}

// recordOf reads a Lease of a group as a record.
func recordOf(lease *coordinationv1.Lease) (shard.Record, error) {
	rec := shard.Record{Name: lease.Name, Version: lease.ResourceVersion, Shard: -1}
	if h := lease.Spec.HolderIdentity; h != nil {
		rec.Member = *h
	}
	switch kind := lease.Labels[ShardKindLabel]; kind {
	case kindMember:
		d := lease.Spec.LeaseDurationSeconds
		if rec.Member == "" || d == nil || *d <= 0 {
			return shard.Record{}, errors.New("a member lease without a holder or a positive duration")
		}
		rec.TTL = time.Duration(*d) * time.Second
	case kindClaim:
		s, err := strconv.Atoi(lease.Labels[ShardLabel])
		if err != nil || s < 0 {
			return shard.Record{}, fmt.Errorf("a claim lease without a valid %s label", ShardLabel)
		}
		rec.Shard = s
		if t := lease.Spec.LeaseTransitions; t != nil {
			rec.Token = int64(*t)
		}
	default:
		return shard.Record{}, fmt.Errorf("%s %q is neither %q nor %q", ShardKindLabel, kind, kindMember, kindClaim)
	}
	return rec, nil
}
