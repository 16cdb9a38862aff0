// Package metricsrv serves the examples' metrics for Prometheus.
package metricsrv

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/listwatch/mirror/adapters/mirrorprom"
	"github.com/listwatch/mirror/examples/internal/cli"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Serve serves, at http://addr/metrics, the metrics of the informers and
// queues given the returned Metrics, with the Go runtime's and the
// process's, until stop is called; stop returns once the server has. It
// prints the address it serves at, and the server's failure if it fails.
func Serve(addr string, p *cli.Printer) (m *mirrorprom.Metrics, stop func(), err error) {
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err = mirrorprom.New(registry)
	if err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			p.Printf("metrics: %v", err)
		}
	}()
	p.Printf("serving metrics at http://%s/metrics", ln.Addr())
	return m, func() {
		srv.Close()
		<-done
	}, nil
}
