package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/listwatch/mirror"
	etcdmirror "github.com/listwatch/mirror/adapters/etcd"
	"github.com/listwatch/mirror/examples/internal/cli"
	"github.com/listwatch/mirror/reconcile"
)

// Service is the value stored under each key.
type Service struct {
	Zone string `json:"zone"`
	Port int    `json:"port"`
}

// decodeService is the adapter's decode function: JSON to Service.
func decodeService(key string, value []byte) (Service, error) {
	var s Service
	if err := json.Unmarshal(value, &s); err != nil {
		return Service{}, fmt.Errorf("decode %s: %w", key, err)
	}
	return s, nil
}

// confSuffix ends the name of every file the renderer owns in its
// directory; it touches no other file there.
const confSuffix = ".conf"

// errBadName is the error for a key whose name under the prefix cannot
// name a file: empty, with a "/", or starting with a ".".
var errBadName = errors.New("the key's name under the prefix cannot name a file")

// renderer is the loop's reconciler: it keeps one file per service,
// <dir>/<name>.conf, in step with the mirror of the prefix. Reconcile
// reads the mirror, not the change, so it does the right thing whatever
// happened to the key meanwhile, and calling it again changes nothing.
type renderer struct {
	inf    *mirror.Informer[string, etcdmirror.Object[Service]]
	prefix string
	dir    string
	p      *cli.Printer

	written, removed atomic.Int64 // files, for the summary
}

// fileName returns the file that renders key, or errBadName.
func (r *renderer) fileName(key string) (string, error) {
	name := strings.TrimPrefix(key, r.prefix)
	if name == "" || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return "", fmt.Errorf("%q: %w", key, errBadName)
	}
	return filepath.Join(r.dir, name+confSuffix), nil
}

// render returns the file's content for a service.
func render(name string, s Service, modRevision int64) string {
	return fmt.Sprintf("# etcd-reconcile: rendered from revision %d\nservice %s\nzone    %s\nport    %d\n",
		modRevision, name, s.Zone, s.Port)
}

// Reconcile writes key's file if the mirror holds key and the file
// differs from what it renders, and removes the file if the mirror does
// not hold key; either way it prints what it did, and nothing if the
// file was in step already.
func (r *renderer) Reconcile(_ context.Context, key string) (reconcile.Result, error) {
	path, err := r.fileName(key)
	if err != nil {
		return reconcile.Result{}, reconcile.Terminal(err) // retrying will not help
	}
	o, ok := r.inf.GetByKey(key)
	if !ok {
		switch err := os.Remove(path); {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return reconcile.Result{}, err // retried after a backoff
		default:
			r.removed.Add(1)
			r.p.Printf("removed %s  (%s is gone)", filepath.Base(path), key)
		}
		return reconcile.Result{}, nil
	}
	name := strings.TrimPrefix(key, r.prefix)
	want := render(name, o.Value, o.ModRevision)
	if have, err := os.ReadFile(path); err == nil && string(have) == want {
		return reconcile.Result{}, nil
	}
	if err := writeAtomically(path, want); err != nil {
		return reconcile.Result{}, err
	}
	r.written.Add(1)
	r.p.Printf("wrote   %s  zone=%s port=%d (rev %d)", filepath.Base(path), o.Value.Zone, o.Value.Port, o.ModRevision)
	return reconcile.Result{}, nil
}

// writeAtomically writes content to path through a temporary file in the
// same directory renamed over it: a reader sees the old file or the new
// one, never part of one.
func writeAtomically(path, content string) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.WriteString(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// rendered returns the files the renderer owns in dir, by name, with their
// content.
func rendered(dir string) (map[string]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	files := map[string]string{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), confSuffix) || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		files[e.Name()] = string(b)
	}
	return files, nil
}
