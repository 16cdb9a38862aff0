package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/listwatch/mirror/shard"
	"github.com/listwatch/mirror/source"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrShardRecord is wrapped by the error reported for a key under a shard
// group's prefix that is neither a member's record nor a shard's claim
// (see ShardBackend). The key is left out of the group's records; the
// rest are read.
var ErrShardRecord = errors.New("etcd: not a shard group's record")

// ShardBackend is a shard.Backend over an etcd prefix: the members of a
// group keep their leases and claims there, each member an etcd lease.
// It is safe for concurrent use.
//
// Under the prefix, a member's record is the key "members/<id>" and the
// claim of shard n is "shards/<n>", n in at least five digits
// ("shards/00042"); each holds the member's ID and is attached to the
// member's etcd lease, so that etcd removes a member's record and its
// claims at once when the lease ends. A Record's Name is its full key,
// its Version the key's ModRevision, and a claim's Token the key's
// CreateRevision: each claim creates the key anew, so a later claim of a
// shard has a larger token, and a write made conditional on the token
// (see Fence) is refused once the shard was claimed again. Member records
// have no TTL: etcd ends leases itself.
//
// A lease's Renew sends one keep-alive request, and no stream is kept
// open between renewals. Errors are classified as the ListWatcher's are:
// a refusal (no permission on the prefix, missing or wrong credentials)
// wraps mirror.ErrPermanent, so that a shard.Member fails loudly instead
// of idling, and a cluster that cannot answer wraps source.ErrUnavailable.
type ShardBackend struct {
	client  *clientv3.Client
	prefix  string
	records shardRecords
}

// NewShardBackend returns the backend of the shard group kept under
// prefix, read and written through c. opts tunes the ListWatcher of the
// group's records (see Options); its zero value is ready to use. A prefix
// should end with "/" and hold nothing but the group's records.
func NewShardBackend(c *clientv3.Client, prefix string, opts Options) *ShardBackend {
	b := &ShardBackend{client: c, prefix: prefix}
	b.records.lw = NewTyped(c, prefix, b.decode, opts)
	return b
}

// Prefix returns the prefix that holds the group's records.
func (b *ShardBackend) Prefix() string { return b.prefix }

// Records returns the source of the group's records: a ListWatcher of the
// prefix, with the adapter's lists, watches, relists after compaction and
// classified errors, whose keys are turned into shard.Records. A key that
// is not a record is skipped and reported with an error wrapping
// ErrShardRecord.
func (b *ShardBackend) Records() source.ListWatcher[shard.Record] { return b.records }

// Join grants an etcd lease of ttl, rounded up to whole seconds (etcd
// raises a shorter one to its own minimum, a few election timeouts), and
// writes the member's record, attached to it.
func (b *ShardBackend) Join(ctx context.Context, id string, ttl time.Duration) (shard.Lease, error) {
	if id == "" {
		return nil, fmt.Errorf("etcd: shard group %q: join with an empty member ID", b.prefix)
	}
	secs := int64((ttl + time.Second - 1) / time.Second)
	grant, err := b.client.Grant(ctx, max(secs, 1))
	if err != nil {
		return nil, b.records.lw.wrapError(ctx, err, "etcd: shard group %q: granting the lease of %s", b.prefix, id)
	}
	l := &shardLease{b: b, id: id, lease: grant.ID}
	if _, err := b.client.Put(ctx, b.memberKey(id), id, clientv3.WithLease(grant.ID)); err != nil {
		err = l.wrapError(ctx, err, "writing the record of")
		// The lease would end by itself; revoking it spares the
		// cluster the wait.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_, _ = b.client.Revoke(rctx, grant.ID)
		cancel()
		return nil, err
	}
	return l, nil
}

func (b *ShardBackend) memberKey(id string) string { return b.prefix + "members/" + id }

func (b *ShardBackend) shardKey(s int) string { return fmt.Sprintf("%sshards/%05d", b.prefix, s) }

// decode reads the key and value of a record; the ListWatcher adds the
// revisions (see shardRecords).
func (b *ShardBackend) decode(key string, value []byte) (shard.Record, error) {
	rest := strings.TrimPrefix(key, b.prefix)
	if id, ok := strings.CutPrefix(rest, "members/"); ok && id != "" {
		if string(value) != id {
			return shard.Record{}, fmt.Errorf("%w: a member's record holds a %d-byte value that is not its ID", ErrShardRecord, len(value))
		}
		return shard.Record{Member: id, Shard: -1}, nil
	}
	if digits, ok := strings.CutPrefix(rest, "shards/"); ok {
		n, err := strconv.Atoi(digits)
		if err == nil && n >= 0 && fmt.Sprintf("%05d", n) == digits {
			return shard.Record{Member: string(value), Shard: n}, nil
		}
	}
	return shard.Record{}, fmt.Errorf("%w: want %q or %q", ErrShardRecord, b.prefix+"members/<id>", b.prefix+"shards/<nnnnn>")
}

// shardLease is a member's etcd lease.
type shardLease struct {
	b     *ShardBackend
	id    string
	lease clientv3.LeaseID
}

// Renew sends one keep-alive request for the lease.
func (l *shardLease) Renew(ctx context.Context) error {
	if _, err := l.b.client.KeepAliveOnce(ctx, l.lease); err != nil {
		return l.wrapError(ctx, err, "renewing the lease of")
	}
	return nil
}

// Claim claims a shard in one transaction that creates its key with the
// lease, provided the key does not exist. A standing record (prev with a
// Version) is deleted first, in a transaction of its own conditional on
// its ModRevision, so that the claim creates the key anew: a put over the
// key would keep its CreateRevision, the token of the claim it replaces.
func (l *shardLease) Claim(ctx context.Context, s int, prev shard.Record) (shard.Record, error) {
	key := l.b.shardKey(s)
	if prev.Version != "" {
		rev, err := parseRev(prev.Version)
		if err != nil {
			return shard.Record{}, fmt.Errorf("etcd: shard group %q: claiming shard %d: %w", l.b.prefix, s, err)
		}
		resp, err := l.b.client.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpDelete(key)).
			Commit()
		if err != nil {
			return shard.Record{}, l.wrapError(ctx, err, fmt.Sprintf("claiming shard %d for", s))
		}
		if !resp.Succeeded {
			return shard.Record{}, fmt.Errorf("etcd: shard group %q: claiming shard %d: %w", l.b.prefix, s, shard.ErrConflict)
		}
	}
	resp, err := l.b.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, l.id, clientv3.WithLease(l.lease)), clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return shard.Record{}, l.wrapError(ctx, err, fmt.Sprintf("claiming shard %d for", s))
	}
	if !resp.Succeeded {
		return shard.Record{}, fmt.Errorf("etcd: shard group %q: claiming shard %d: %w", l.b.prefix, s, shard.ErrConflict)
	}
	kvs := resp.Responses[1].GetResponseRange().GetKvs()
	if len(kvs) != 1 {
		// The key was created in this transaction and read in it.
		return shard.Record{}, fmt.Errorf("etcd: shard group %q: claiming shard %d: the claim's key was not read back", l.b.prefix, s)
	}
	return claimRecord(kvs[0], l.id, s), nil
}

// claimRecord is the record of a claim that the lease's transaction wrote.
func claimRecord(kv *mvccpb.KeyValue, id string, s int) shard.Record {
	return shard.Record{
		Name:    string(kv.Key),
		Member:  id,
		Shard:   s,
		Token:   kv.CreateRevision,
		Version: formatRev(kv.ModRevision),
	}
}

// Release deletes the claim's key if it is still this claim: created at
// the claim's token, held by this member.
func (l *shardLease) Release(ctx context.Context, claim shard.Record) error {
	key := l.b.shardKey(claim.Shard)
	_, err := l.b.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", claim.Token),
			clientv3.Compare(clientv3.Value(key), "=", l.id)).
		Then(clientv3.OpDelete(key)).
		Commit()
	if err != nil {
		return l.wrapError(ctx, err, fmt.Sprintf("releasing shard %d of", claim.Shard))
	}
	return nil
}

// Expire is not used with etcd, which ends leases itself: it returns an
// error wrapping errors.ErrUnsupported.
func (l *shardLease) Expire(ctx context.Context, m shard.Record) error {
	return fmt.Errorf("etcd: shard group %q: expiring %s: %w: etcd ends leases itself", l.b.prefix, m.Member, errors.ErrUnsupported)
}

// Leave revokes the lease: etcd removes the member's record and its
// claims in one revision. A lease that has ended already is left.
func (l *shardLease) Leave(ctx context.Context) error {
	_, err := l.b.client.Revoke(ctx, l.lease)
	if err != nil && !leaseNotFound(err) {
		return l.wrapError(ctx, err, "revoking the lease of")
	}
	return nil
}

// wrapError describes err, an error of a call that did what for the
// lease's member, classified as the ListWatcher's are; an ended lease
// wraps shard.ErrLeaseLost.
func (l *shardLease) wrapError(ctx context.Context, err error, what string) error {
	if leaseNotFound(err) {
		return fmt.Errorf("etcd: shard group %q: %s %s: %w: %w", l.b.prefix, what, l.id, shard.ErrLeaseLost, err)
	}
	return l.b.records.lw.wrapError(ctx, err, "etcd: shard group %q: %s %s", l.b.prefix, what, l.id)
}

// leaseNotFound reports whether err says that etcd has no such lease.
func leaseNotFound(err error) bool {
	_, cause := typedError(err)
	return errors.Is(cause, rpctypes.ErrLeaseNotFound)
}

// shardRecords is the ListWatcher of a group's records: the keys under
// its prefix as Records. It passes on the ListWatcher's optional
// interfaces, so that the members' informers list in chunks and can serve
// consistent reads.
type shardRecords struct {
	lw *ListWatcher[shard.Record]
}

// record completes the record decode read from o's key and value with o's
// key and revisions. A deletion or error that carries the key alone
// yields a record with its Name alone.
func record(o Object[shard.Record]) shard.Record {
	r := o.Value
	r.Name = o.Key
	r.Token = o.CreateRevision
	if o.ModRevision > 0 {
		r.Version = formatRev(o.ModRevision)
	}
	return r
}

func records(res source.ListResult[Object[shard.Record]]) source.ListResult[shard.Record] {
	out := source.ListResult[shard.Record]{
		Items:           make([]shard.Record, len(res.Items)),
		ResourceVersion: res.ResourceVersion,
		Continue:        res.Continue,
		Skipped:         res.Skipped,
	}
	for i, o := range res.Items {
		out.Items[i] = record(o)
	}
	return out
}

func (r shardRecords) List(ctx context.Context, opts source.ListOptions) (source.ListResult[shard.Record], error) {
	res, err := r.lw.List(ctx, opts)
	return records(res), err
}

func (r shardRecords) ListChunks(ctx context.Context, opts source.ListOptions, chunk func(source.ListResult[shard.Record]) error) error {
	return r.lw.ListChunks(ctx, opts, func(res source.ListResult[Object[shard.Record]]) error {
		return chunk(records(res))
	})
}

func (r shardRecords) Watch(ctx context.Context, opts source.WatchOptions) (source.Watcher[shard.Record], error) {
	w, err := r.lw.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return recordWatcher{w}, nil
}

func (r shardRecords) CurrentVersion(ctx context.Context) (string, error) {
	return r.lw.CurrentVersion(ctx)
}

func (r shardRecords) RequestProgress(ctx context.Context) error { return r.lw.RequestProgress(ctx) }

func (r shardRecords) CompareVersions(a, b string) (int, error) { return r.lw.CompareVersions(a, b) }

// recordWatcher is a watch of a group's records.
type recordWatcher struct {
	w source.Watcher[Object[shard.Record]]
}

func (w recordWatcher) Next(ctx context.Context) (source.Event[shard.Record], error) {
	ev, err := w.w.Next(ctx)
	return source.Event[shard.Record]{
		Type:             ev.Type,
		Object:           record(ev.Object),
		ResourceVersion:  ev.ResourceVersion,
		InitialEventsEnd: ev.InitialEventsEnd,
		KeyOnly:          ev.KeyOnly,
		Err:              ev.Err,
		More:             ev.More,
	}, err
}

func (w recordWatcher) Stop() { w.w.Stop() }

var (
	_ shard.Backend                    = (*ShardBackend)(nil)
	_ source.ChunkLister[shard.Record] = shardRecords{}
	_ source.CurrentVersioner          = shardRecords{}
	_ source.ProgressRequester         = shardRecords{}
	_ source.VersionComparer           = shardRecords{}
)
