// Command apilist prints the exported API of the given packages, one
// feature a line, sorted, in the spirit of the Go repository's api/*.txt:
//
//	pkg github.com/listwatch/mirror, func NewFIFO[K comparable, T any](KeyFunc[K, T]) *FIFO[K, T]
//	pkg github.com/listwatch/mirror, method (*FIFO[K, T]) Add(T) error
//	pkg github.com/listwatch/mirror, type FIFO[K comparable, T any] struct
//	pkg github.com/listwatch/mirror, type Freshness struct, ConfirmedAt time.Time
//
// Every exported constant (with its value), variable, function, type
// (with its exported fields or interface methods) and method is listed.
// Parameter names are left out, as renaming one changes no caller; type
// parameter names are kept, as the constraints refer to them. Types of
// other packages are qualified by their import path.
//
// CI compares the listing of each published module with the file under
// api/ that records it, so that an API change is a deliberate one.
//
// Usage, from the repository's root: go run ./.ci/apilist importpath...
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

func main() {
	lines, err := list(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "apilist:", err)
		os.Exit(2)
	}
	for _, l := range lines {
		fmt.Println(l)
	}
}

// goPackage is what apilist needs of `go list -json`.
type goPackage struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Export     string
	DepOnly    bool
}

// list type-checks the packages from their sources, importing their
// dependencies from the export data the go command builds, and returns
// their features, sorted.
func list(paths []string) ([]string, error) {
	if len(paths) == 0 {
		return nil, errors.New("usage: apilist importpath [importpath ...] (run from the repository root)")
	}
	cmd := exec.Command("go", append([]string{"list", "-export", "-deps", "-json=ImportPath,Dir,GoFiles,Export,DepOnly"}, paths...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	exports := make(map[string]string)
	var targets []goPackage
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p goPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list: %w", err)
		}
		exports[p.ImportPath] = p.Export
		if !p.DepOnly {
			targets = append(targets, p)
		}
	}

	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok || file == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
	var lines []string
	for _, p := range targets {
		var files []*ast.File
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				return nil, err
			}
			files = append(files, f)
		}
		pkg, err := (&types.Config{Importer: imp}).Check(p.ImportPath, fset, files, nil)
		if err != nil {
			return nil, fmt.Errorf("type-check %s: %w", p.ImportPath, err)
		}
		lines = append(lines, features(pkg)...)
	}
	slices.Sort(lines)
	return slices.Compact(lines), nil
}

// features lists the exported API of pkg.
func features(pkg *types.Package) []string {
	q := func(other *types.Package) string {
		if other == pkg {
			return ""
		}
		return other.Path()
	}
	str := func(t types.Type) string { return types.TypeString(t, q) }
	var out []string
	add := func(format string, args ...any) {
		out = append(out, "pkg "+pkg.Path()+", "+fmt.Sprintf(format, args...))
	}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch obj := obj.(type) {
		case *types.Const:
			add("const %s %s = %s", name, str(obj.Type()), obj.Val().ExactString())
		case *types.Var:
			add("var %s %s", name, str(obj.Type()))
		case *types.Func:
			sig := obj.Type().(*types.Signature)
			add("func %s%s%s", name, typeParams(sig.TypeParams(), str), signature(sig, str))
		case *types.TypeName:
			if alias, ok := obj.Type().(*types.Alias); ok {
				add("type %s%s = %s", name, typeParams(alias.TypeParams(), str), str(alias.Rhs()))
				continue
			}
			named := obj.Type().(*types.Named)
			decl := "type " + name + typeParams(named.TypeParams(), str)
			switch u := named.Underlying().(type) {
			case *types.Struct:
				add("%s struct", decl)
				for f := range u.Fields() {
					switch {
					case !f.Exported():
					case f.Embedded():
						add("%s struct, embedded %s", decl, str(f.Type()))
					default:
						add("%s struct, %s %s", decl, f.Name(), str(f.Type()))
					}
				}
			case *types.Interface:
				add("%s interface", decl)
				for m := range u.ExplicitMethods() {
					if m.Exported() {
						add("%s interface, %s%s", decl, m.Name(), signature(m.Type().(*types.Signature), str))
					} else {
						add("%s interface, unexported methods", decl)
					}
				}
				for e := range u.EmbeddedTypes() {
					add("%s interface, embedded %s", decl, str(e))
				}
			case *types.Signature:
				add("%s func%s", decl, signature(u, str))
			default:
				add("%s %s", decl, str(u))
			}
			for m := range named.Methods() {
				if m.Exported() {
					sig := m.Type().(*types.Signature)
					add("method (%s) %s%s", str(sig.Recv().Type()), m.Name(), signature(sig, str))
				}
			}
		}
	}
	return out
}

// typeParams returns "[K comparable, T any]", or "" for none.
func typeParams(tps *types.TypeParamList, str func(types.Type) string) string {
	if tps.Len() == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("[")
	for i := range tps.Len() {
		if i > 0 {
			b.WriteString(", ")
		}
		tp := tps.At(i)
		b.WriteString(tp.Obj().Name() + " " + str(tp.Constraint()))
	}
	b.WriteString("]")
	return b.String()
}

// signature returns "(A, ...B) (C, error)": the parameters' and results'
// types, without their names.
func signature(sig *types.Signature, str func(types.Type) string) string {
	var b strings.Builder
	b.WriteString("(")
	for i := range sig.Params().Len() {
		if i > 0 {
			b.WriteString(", ")
		}
		t := sig.Params().At(i).Type()
		if sig.Variadic() && i == sig.Params().Len()-1 {
			b.WriteString("..." + str(t.(*types.Slice).Elem()))
		} else {
			b.WriteString(str(t))
		}
	}
	b.WriteString(")")
	switch res := sig.Results(); res.Len() {
	case 0:
	case 1:
		b.WriteString(" " + str(res.At(0).Type()))
	default:
		b.WriteString(" (")
		for i := range res.Len() {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(str(res.At(i).Type()))
		}
		b.WriteString(")")
	}
	return b.String()
}
