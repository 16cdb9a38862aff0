package etcd

import (
	"context"
	"errors"
	"fmt"

	"github.com/listwatch/mirror/shard"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrNoToken is returned by Fence, FencedTxn and FencedPut for a context
// that carries no shard.Token: work not granted by a shard.Member.
var ErrNoToken = errors.New("etcd: the context carries no shard token")

// Fence returns the comparison that holds while the claim whose
// shard.Token ctx carries still stands: the claim's key still has the
// CreateRevision of that claim. Add it to the If of a transaction of your
// own, which etcd then refuses once another member has claimed the shard
// (or the claim was released, or its lease ended), however late the
// transaction arrives. It returns ErrNoToken if ctx carries no token.
//
// A token from a ShardBackend's member names the claim's etcd key; one
// from another backend does not, and fences nothing useful.
func Fence(ctx context.Context) (clientv3.Cmp, error) {
	t, ok := shard.TokenFrom(ctx)
	if !ok {
		return clientv3.Cmp{}, ErrNoToken
	}
	return clientv3.Compare(clientv3.CreateRevision(t.Record), "=", t.Value), nil
}

// FencedTxn runs ops in one transaction through kv, if the claim whose
// shard.Token ctx carries still stands (see Fence) and every comparison
// of cmps holds. It returns an error wrapping shard.ErrFenced if etcd
// refused the transaction because the claim no longer stands, whatever
// cmps say; if only cmps failed, it returns the response, whose
// Succeeded is false, and no error. Other errors are classified as the
// ListWatcher's are (mirror.ErrPermanent, source.ErrUnavailable). It
// returns ErrNoToken if ctx carries no token.
//
// ops must not write the claim's key. The transaction's Else branch is
// a keys-only read of that key, which tells the two refusals apart in
// the same round trip.
func FencedTxn(ctx context.Context, kv clientv3.KV, cmps []clientv3.Cmp, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	fence, err := Fence(ctx)
	if err != nil {
		return nil, err
	}
	t, _ := shard.TokenFrom(ctx)
	resp, err := kv.Txn(ctx).
		If(append([]clientv3.Cmp{fence}, cmps...)...).
		Then(ops...).
		Else(clientv3.OpGet(t.Record, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return nil, wrapError(ctx, err, "etcd: fenced write of shard %d", t.Shard)
	}
	if resp.Succeeded {
		return resp, nil
	}
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) != 1 || kvs[0].CreateRevision != t.Value {
		return nil, fmt.Errorf("etcd: fenced write of shard %d with token %d: %w", t.Shard, t.Value, shard.ErrFenced)
	}
	resp.Responses = nil // the Else branch's read is this function's own
	return resp, nil
}

// FencedPut puts val at key through kv, as kv.Put does, if the claim
// whose shard.Token ctx carries still stands. It returns an error
// wrapping shard.ErrFenced if etcd refused the write because the claim
// no longer stands; other errors are as FencedTxn's.
func FencedPut(ctx context.Context, kv clientv3.KV, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	resp, err := FencedTxn(ctx, kv, nil, clientv3.OpPut(key, val, opts...))
	if err != nil {
		return nil, err
	}
	return (*clientv3.PutResponse)(resp.Responses[0].GetResponsePut()), nil
}
