package k8s

import (
	"io"
	"net"
	"sync"
)

// proxy forwards loopback TCP connections to a target it can switch: a
// client keeps one address while the server behind it is stopped and
// another started. While down it does not listen, so clients are refused
// as they are by a stopped server.
type proxy struct {
	addr string

	mu    sync.Mutex
	ln    net.Listener // nil while down
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// newProxy reserves a loopback address for a proxy, which is down until up.
func newProxy() (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{addr: ln.Addr().String(), conns: make(map[net.Conn]struct{})}
	return p, ln.Close()
}

// up starts forwarding to target (host:port).
func (p *proxy) up(target string) error {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() { p.serve(ln, target) })
	return nil
}

// down closes the listener and every connection.
func (p *proxy) down() {
	p.mu.Lock()
	ln := p.ln
	p.ln = nil
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
}

// close takes the proxy down and waits for its goroutines.
func (p *proxy) close() {
	p.down()
	p.wg.Wait()
}

func (p *proxy) serve(ln net.Listener, target string) {
	for {
		in, err := ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		if p.ln != ln {
			p.mu.Unlock()
			in.Close()
			out.Close()
			continue
		}
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(in, out) })
		p.wg.Go(func() { p.pipe(out, in) })
	}
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
