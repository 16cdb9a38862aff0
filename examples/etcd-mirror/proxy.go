package main

import (
	"io"
	"net"
	"sync"
)

// proxy forwards TCP connections from a loopback port to the embedded
// etcd. The demo's mirror reaches etcd through it, so that the demo can cut
// the mirror off, as a network failure would, while it goes on writing to
// etcd directly.
type proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// startProxy starts a proxy to target (host:port).
func startProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, conns: make(map[net.Conn]struct{})}
	p.wg.Go(p.serve)
	return p, nil
}

// endpoint is the proxy's URL, for a client.
func (p *proxy) endpoint() string { return "http://" + p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		if !p.track(in, out) {
			in.Close()
			out.Close()
			continue
		}
		p.wg.Go(func() { p.pipe(in, out) })
		p.wg.Go(func() { p.pipe(out, in) })
	}
}

// track records a new pair of connections, unless the proxy is cut.
func (p *proxy) track(in, out net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	p.conns[in], p.conns[out] = struct{}{}, struct{}{}
	return true
}

// pipe copies src to dst until either fails, then closes both.
func (p *proxy) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	p.mu.Lock()
	delete(p.conns, src)
	delete(p.conns, dst)
	p.mu.Unlock()
	src.Close()
	dst.Close()
}

// Cut closes every connection and refuses new ones until Resume.
func (p *proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Resume forwards new connections again.
func (p *proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

// close stops the proxy and waits until its goroutines have returned.
func (p *proxy) close() {
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}
