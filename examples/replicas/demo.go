package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/listwatch/mirror/examples/internal/cli"
	"github.com/listwatch/mirror/shard"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// keyName names key i.
func keyName(i int) string { return fmt.Sprintf("item-%04d", i) }

// seed writes n keys, in transactions of 100.
func seed(ctx context.Context, c *clientv3.Client, n int) error {
	var ops []clientv3.Op
	for i := range n {
		ops = append(ops, clientv3.OpPut(root+"keys/"+keyName(i), "v1"))
		if len(ops) == 100 || i == n-1 {
			if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
				return fmt.Errorf("write the keys: %w", err)
			}
			ops = ops[:0]
		}
	}
	return nil
}

// write changes a random key of n every 20 ms until ctx ends.
func write(ctx context.Context, c *clientv3.Client, n int) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for v := 2; ; v++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if _, err := c.Put(ctx, root+"keys/"+keyName(rand.IntN(n)), fmt.Sprintf("v%d", v)); err != nil {
			return fmt.Errorf("change a key: %w", err)
		}
	}
}

// replicaName is the name of the replica whose member ID is id: the ID
// without its random suffix.
func replicaName(id string) string {
	if i := strings.LastIndexByte(id, '-'); i > 0 {
		return id[:i]
	}
	return id
}

// watcher follows the group's claims and the keys' statuses in etcd.
type watcher struct {
	client  *clientv3.Client
	p       *cli.Printer
	timeout time.Duration
}

// prefix returns the keys under prefix, without it, and their values.
func (w *watcher) prefix(ctx context.Context, prefix string) (map[string]string, error) {
	resp, err := w.client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[strings.TrimPrefix(string(kv.Key), prefix)] = string(kv.Value)
	}
	return out, nil
}

// until checks cond every 50 ms until it holds, ctx ends or the demo's
// timeout passes; what names the wait in the error.
func (w *watcher) until(ctx context.Context, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(w.timeout)
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("%s: not within --demo-timeout %v; last error: %w", what, w.timeout, err)
			}
			return fmt.Errorf("%s: not within --demo-timeout %v", what, w.timeout)
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// split waits until every shard is claimed by the replicas names, each
// holding some, printing each new split on the way, and returns how many
// each holds.
func (w *watcher) split(ctx context.Context, names []string) (map[string]int, error) {
	var held map[string]int
	err := w.until(ctx, fmt.Sprintf("the shards split among %v", names), func() (bool, error) {
		claims, err := w.prefix(ctx, root+"group/shards/")
		if err != nil {
			return false, err
		}
		held = map[string]int{}
		for _, id := range claims {
			held[replicaName(id)]++
		}
		return len(claims) == shard.DefaultShards && slices.Equal(slices.Sorted(maps.Keys(held)), slices.Sorted(slices.Values(names))), nil
	})
	if err == nil {
		w.p.Printf("shards held: %s", splitLine(held))
	}
	return held, err
}

// splitLine says how many shards each replica holds, in name order.
func splitLine(held map[string]int) string {
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(held)) {
		parts = append(parts, fmt.Sprintf("%s %d", n, held[n]))
	}
	total := 0
	for _, n := range held {
		total += n
	}
	return fmt.Sprintf("%s (%d shards)", strings.Join(parts, ", "), total)
}

// converged waits until every key's status holds its value.
func (w *watcher) converged(ctx context.Context) error {
	return w.until(ctx, "every key converged", func() (bool, error) {
		keys, err := w.prefix(ctx, root+"keys/")
		if err != nil {
			return false, err
		}
		status, err := w.prefix(ctx, root+"status/")
		if err != nil {
			return false, err
		}
		return maps.Equal(keys, status), nil
	})
}

// child is a replica process.
type child struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.Closer
	exited chan struct{}
}

// startChild starts exe as the replica cfg describes. Its output is
// printed line by line, after its name.
func startChild(exe string, cfg replicaConfig, p *cli.Printer) (*child, error) {
	env, err := cfg.env()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), env)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cfg.Name, err)
	}
	c := &child{name: cfg.Name, cmd: cmd, stdin: stdin, exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.Printf("  %s", sc.Text())
		}
		_ = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// kill ends the replica with SIGKILL, as a crash does.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	<-c.exited
}

// stop asks the replica to leave the group (SIGTERM) and waits for it,
// killing it if it has not exited after 20 seconds.
func (c *child) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(20 * time.Second):
		c.kill()
	}
	_ = c.stdin.Close()
}
