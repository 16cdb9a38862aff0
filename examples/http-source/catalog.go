package main

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Product is what the catalog holds under each name.
type Product struct {
	Name     string `json:"name"`
	Price    int    `json:"price"`    // in cents
	Revision int64  `json:"revision"` // of the product's last change
}

// change is one entry of the catalog's history.
type change struct {
	Type    string  `json:"type"` // "added", "modified" or "deleted"
	Product Product `json:"product"`
}

// productsPage and changesPage are the API's answers.
type productsPage struct {
	Revision int64     `json:"revision"`
	Products []Product `json:"products"`
}

type changesPage struct {
	Revision int64    `json:"revision"`
	Changes  []change `json:"changes"`
}

// catalog is the HTTP API that this example mirrors: prices by product
// name, with a revision that every change increments and a bounded
// history of the latest changes. The example serves it itself, so that it
// runs anywhere; in real life it is someone else's service, and only its
// API matters:
//
//	GET /products                  every product, and the revision they are at
//	GET /changes?after=R&wait=30s  the changes after revision R, in order,
//	                               waiting up to wait for one;
//	                               410 Gone if the history no longer reaches R
type catalog struct {
	mu        sync.Mutex
	rev       int64
	products  map[string]Product
	history   []change // the latest changes, oldest first
	keep      int      // how many changes history holds
	compacted int64    // the revision of the newest change dropped from history
	changed   chan struct{}
}

func newCatalog(keep int) *catalog {
	return &catalog{rev: 1, compacted: 1, products: make(map[string]Product), keep: keep, changed: make(chan struct{})}
}

// set creates or changes a product and returns the change's revision.
func (c *catalog) set(name string, price int) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	typ := "modified"
	if _, ok := c.products[name]; !ok {
		typ = "added"
	}
	c.rev++
	p := Product{Name: name, Price: price, Revision: c.rev}
	c.products[name] = p
	c.record(change{Type: typ, Product: p})
	return c.rev
}

// remove deletes a product and returns the change's revision, or reports
// that there was no such product.
func (c *catalog) remove(name string) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.products[name]
	if !ok {
		return c.rev, false
	}
	c.rev++
	delete(c.products, name)
	p.Revision = c.rev
	c.record(change{Type: "deleted", Product: p})
	return c.rev, true
}

// record appends ch to the history, drops what exceeds it, and wakes the
// requests waiting for a change.
func (c *catalog) record(ch change) {
	c.history = append(c.history, ch)
	if drop := len(c.history) - c.keep; drop > 0 {
		c.compacted = c.history[drop-1].Product.Revision
		c.history = append(c.history[:0], c.history[drop:]...)
	}
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *catalog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/products":
		c.mu.Lock()
		page := productsPage{Revision: c.rev, Products: make([]Product, 0, len(c.products))}
		for _, p := range c.products {
			page.Products = append(page.Products, p)
		}
		c.mu.Unlock()
		slices.SortFunc(page.Products, func(a, b Product) int { return strings.Compare(a.Name, b.Name) })
		reply(w, page)
	case "/changes":
		after, err := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
		if err != nil {
			http.Error(w, "after: want a revision", http.StatusBadRequest)
			return
		}
		wait, _ := time.ParseDuration(r.URL.Query().Get("wait"))
		timer := time.NewTimer(wait)
		defer timer.Stop()
		for {
			c.mu.Lock()
			if after < c.compacted {
				c.mu.Unlock()
				http.Error(w, "revision compacted", http.StatusGone)
				return
			}
			page := changesPage{Revision: c.rev}
			for _, ch := range c.history {
				if ch.Product.Revision > after {
					page.Changes = append(page.Changes, ch)
				}
			}
			changed := c.changed
			c.mu.Unlock()
			if len(page.Changes) > 0 {
				reply(w, page)
				return
			}
			select {
			case <-changed:
			case <-timer.C:
				reply(w, page) // nothing yet: the revision alone
				return
			case <-r.Context().Done():
				return
			}
		}
	default:
		http.NotFound(w, r)
	}
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
