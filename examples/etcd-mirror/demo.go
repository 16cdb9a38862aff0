package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/listwatch/mirror/examples/internal/cli"
	clientv3 "go.etcd.io/etcd/client/v3"
)

var zones = []string{"eu-west", "eu-north", "us-east", "ap-south"}

// demoWriter writes demo data into the embedded etcd, directly, not
// through the proxy the mirror reads through.
type demoWriter struct {
	client *clientv3.Client
	prefix string
	live   []string // keys that exist, which the changes choose from
	spare  []string // seeded keys that only the outage changes
	next   int      // next new service number
	rng    *rand.Rand
	broken bool // whether a service's value was made undecodable
}

func (d *demoWriter) put(ctx context.Context, name string) (int64, error) {
	v, _ := json.Marshal(Service{Name: name, Zone: zones[d.rng.IntN(len(zones))], Port: 1024 + d.rng.IntN(60000)})
	resp, err := d.client.Put(ctx, d.prefix+name, string(v))
	if err != nil {
		return 0, fmt.Errorf("demo put: %w", err)
	}
	return resp.Header.Revision, nil
}

func (d *demoWriter) delete(ctx context.Context, name string) (int64, error) {
	resp, err := d.client.Delete(ctx, d.prefix+name)
	if err != nil {
		return 0, fmt.Errorf("demo delete: %w", err)
	}
	return resp.Header.Revision, nil
}

// seed writes n services, many per transaction.
func (d *demoWriter) seed(ctx context.Context, n int) error {
	d.rng = rand.New(rand.NewPCG(1, 2))
	rng := d.rng
	const perTxn = 100
	for d.next < n {
		var ops []clientv3.Op
		for ; d.next < n && len(ops) < perTxn; d.next++ {
			name := fmt.Sprintf("svc-%05d", d.next)
			v, _ := json.Marshal(Service{Name: name, Zone: zones[rng.IntN(len(zones))], Port: 1024 + rng.IntN(60000)})
			ops = append(ops, clientv3.OpPut(d.prefix+name, string(v)))
			if len(d.spare) < 3 {
				d.spare = append(d.spare, name)
			} else {
				d.live = append(d.live, name)
			}
		}
		if _, err := d.client.Txn(ctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("demo seed: %w", err)
		}
	}
	return nil
}

// run writes n changes (creates, updates, deletes, and, the first time,
// one value that does not decode) and returns the last revision written.
func (d *demoWriter) run(ctx context.Context, n int, p *cli.Printer) (int64, error) {
	rng := d.rng
	var rev int64
	var err error
	for i := range n {
		switch {
		case i == n/2 && !d.broken && len(d.live) > 0:
			// A service whose value stops decoding: the mirror
			// reports it and drops the key. It stays broken.
			name := d.take(rng.IntN(len(d.live)))
			resp, err := d.client.Put(ctx, d.prefix+name, "{not json")
			if err != nil {
				return 0, fmt.Errorf("demo put: %w", err)
			}
			rev, d.broken = resp.Header.Revision, true
			p.Printf("wrote  %s%s = {not json  (the mirror reports it and drops the key)", d.prefix, name)
		case rng.IntN(4) == 0 && len(d.live) > 0:
			if rev, err = d.delete(ctx, d.take(rng.IntN(len(d.live)))); err != nil {
				return 0, err
			}
		case rng.IntN(3) == 0:
			name := fmt.Sprintf("svc-%05d", d.next)
			d.next++
			d.live = append(d.live, name)
			if rev, err = d.put(ctx, name); err != nil {
				return 0, err
			}
		default:
			if len(d.live) == 0 {
				continue
			}
			if rev, err = d.put(ctx, d.live[rng.IntN(len(d.live))]); err != nil {
				return 0, err
			}
		}
		if i%50 == 49 {
			// A breath now and then, so the stream looks like traffic.
			time.Sleep(5 * time.Millisecond)
		}
	}
	return rev, nil
}

// outage cuts the mirror off from etcd, then deletes two services,
// deletes a third and creates it again, and compacts etcd's history, all
// while the mirror cannot see it; then it lets the mirror reconnect. The
// mirror's watch cannot resume from a compacted revision, so the mirror
// lists the prefix again: it learns of the deletions from what the list
// lacks (OnDelete with finalStateUnknown), and of the re-created service
// from its new CreateRevision (OnDelete of the old one, then OnAdd).
func (d *demoWriter) outage(ctx context.Context, cut *proxy, p *cli.Printer) (int64, error) {
	// Seeded services, which the mirror knows however far behind its
	// watch is, and which the changes leave alone.
	if len(d.spare) < 3 {
		return 0, fmt.Errorf("demo outage: %d seeded services to change, want 3", len(d.spare))
	}
	deleted, recreated := d.spare[:2], d.spare[2]
	d.spare = nil
	d.live = append(d.live, recreated)

	cut.Cut()
	p.Printf("cut the mirror off from etcd")
	for _, name := range deleted {
		if _, err := d.delete(ctx, name); err != nil {
			return 0, err
		}
	}
	if _, err := d.delete(ctx, recreated); err != nil {
		return 0, err
	}
	rev, err := d.put(ctx, recreated)
	if err != nil {
		return 0, err
	}
	if _, err := d.client.Compact(ctx, rev); err != nil {
		return 0, fmt.Errorf("demo compact: %w", err)
	}
	p.Printf("while cut off: deleted %s and %s; deleted and re-created %s; compacted etcd at revision %d",
		deleted[0], deleted[1], recreated, rev)
	cut.Resume()
	p.Printf("let the mirror reconnect: it must relist")
	return rev, nil
}

// take removes the i-th live service from the list and returns its name.
func (d *demoWriter) take(i int) string {
	name := d.live[i]
	d.live[i] = d.live[len(d.live)-1]
	d.live = d.live[:len(d.live)-1]
	return name
}
