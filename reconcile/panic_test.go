package reconcile_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listwatch/mirror"
	"github.com/listwatch/mirror/reconcile"
)

// secret is a panic value whose contents must stay out of reports.
type secret struct{ Password string }

// report is one failure as a test reads it back, from an ErrorHandler or
// from a log record.
type report struct {
	key   string
	stack bool   // the report carries the panic's stack
	text  string // the error's text
	line  int    // the length of the whole report, stack aside
}

// TestLoop_PanicStackOncePerKey: a key whose Reconcile panics on every
// retry has its stack reported on the first panic only, until the key
// succeeds; later panics are one-line errors naming the key and the
// panic value's type, never an object's contents, and a long string is
// capped. Each key has its own first panic.
func TestLoop_PanicStackOncePerKey(t *testing.T) {
	tests := []struct {
		name string
		// opts sets the loop's reporting; read returns what was reported.
		opts func(t *testing.T) (reconcile.Options, func() []report)
	}{
		{
			name: "ErrorHandler",
			opts: func(t *testing.T) (reconcile.Options, func() []report) {
				var errs errorLog
				read := func() []report {
					var out []report
					for _, err := range errs.all() {
						var e *reconcile.Error[string]
						require.ErrorAs(t, err, &e)
						var p *mirror.PanicError
						require.ErrorAs(t, err, &p)
						out = append(out, report{key: e.Key, stack: len(p.Stack) > 0, text: err.Error(), line: len(err.Error())})
					}
					return out
				}
				return reconcile.Options{Name: "test", ErrorHandler: errs.handle}, read
			},
		},
		{
			name: "Logger",
			opts: func(t *testing.T) (reconcile.Options, func() []report) {
				log := &jsonLog{}
				read := func() []report {
					var out []report
					for _, rec := range log.records(t) {
						_, stack := rec["stack"]
						delete(rec, "stack")
						text, _ := rec["err"].(string)
						key, _ := rec["key"].(string)
						line, err := json.Marshal(rec)
						require.NoError(t, err)
						out = append(out, report{key: key, stack: stack, text: text, line: len(line)})
					}
					return out
				}
				return reconcile.Options{Name: "test", Logger: log.logger()}, read
			},
		},
	}
	long := strings.Repeat("x", 10_000)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				calls := map[string]int{}
				mk := func(g *rig) reconcile.Reconciler[string] {
					return reconcile.Func[string](func(ctx context.Context, key string) (reconcile.Result, error) {
						mu.Lock()
						calls[key]++
						n := calls[key]
						mu.Unlock()
						switch {
						case key == "a" && n != 5 && n != 7: // a succeeds on its 5th and 7th calls
							panic(secret{Password: "hunter2"})
						case key == "b" && n <= 3:
							panic(long)
						case key == "c" && n <= 2:
							panic(errors.New("bad state"))
						}
						return reconcile.Result{}, nil
					})
				}
				opts, read := tt.opts(t)
				g := startRig(t, mk, opts, item{Name: "a"}, item{Name: "b"}, item{Name: "c"})
				time.Sleep(time.Hour)
				synctest.Wait()
				g.put(t, item{Name: "a", Val: 1}) // a panics again after its success
				time.Sleep(time.Hour)
				synctest.Wait()
				require.NoError(t, g.stop())

				stacks := map[string][]bool{}
				for _, r := range read() {
					stacks[r.key] = append(stacks[r.key], r.stack)
					assert.NotContains(t, r.text, "\n", "one line")
					assert.Less(t, r.line, 512, "report of key %s: %.100s", r.key, r.text)
					assert.Contains(t, r.text, "panic")
					switch r.key {
					case "a":
						assert.Contains(t, r.text, "reconcile_test.secret", "names the value's type")
						assert.NotContains(t, r.text, "hunter2", "the value's contents")
					case "b":
						assert.Contains(t, r.text, "xxxxxxxx", "a string value, capped")
					case "c":
						assert.Contains(t, r.text, "bad state", "an error value")
					}
				}
				assert.Equal(t, map[string][]bool{
					"a": {true, false, false, false, true},
					"b": {true, false, false},
					"c": {true, false},
				}, stacks, "which reports carry the stack")
			})
		})
	}
}
