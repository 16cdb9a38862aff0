// Command doccheck lists the exported names of the given package
// directories that have no doc comment: types, functions, methods,
// constants and variables, struct fields and interface methods. It exits
// with status 1 if it finds any. Test files are skipped.
//
// Usage: go run ./.ci/doccheck dir...
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	var missing []string
	for _, dir := range os.Args[1:] {
		missing = append(missing, check(dir)...)
	}
	sort.Strings(missing)
	for _, m := range missing {
		fmt.Println(m)
	}
	if len(missing) > 0 {
		fmt.Fprintf(os.Stderr, "doccheck: %d exported names without a doc comment\n", len(missing))
		os.Exit(1)
	}
}

func check(dir string) []string {
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "doccheck:", err)
		os.Exit(2)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			fmt.Fprintln(os.Stderr, "doccheck:", err)
			os.Exit(2)
		}
		files = append(files, f)
	}
	var out []string
	report := func(pos token.Pos, what string) {
		p := fset.Position(pos)
		out = append(out, fmt.Sprintf("%s:%d: %s", filepath.ToSlash(p.Filename), p.Line, what))
	}
	for _, f := range files {
		if f.Name.Name == "main" {
			continue
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() || (d.Recv != nil && !exportedRecv(d.Recv)) {
					continue
				}
				if d.Doc == nil {
					report(d.Pos(), "func "+d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						if s.Doc == nil && d.Doc == nil {
							report(s.Pos(), "type "+s.Name.Name)
						}
						members(s, report)
					case *ast.ValueSpec:
						for _, n := range s.Names {
							// A name in a documented group is covered by
							// the group's comment.
							if n.IsExported() && s.Doc == nil && s.Comment == nil && d.Doc == nil {
								report(n.Pos(), "value "+n.Name)
							}
						}
					}
				}
			}
		}
	}
	return out
}

// members reports the exported fields and interface methods of s without a
// comment of their own, above or beside them.
func members(s *ast.TypeSpec, report func(token.Pos, string)) {
	var list *ast.FieldList
	switch t := s.Type.(type) {
	case *ast.StructType:
		list = t.Fields
	case *ast.InterfaceType:
		list = t.Methods
	default:
		return
	}
	for _, f := range list.List {
		if f.Doc != nil || f.Comment != nil {
			continue
		}
		for _, n := range f.Names {
			if n.IsExported() {
				report(n.Pos(), s.Name.Name+"."+n.Name)
			}
		}
	}
}

func exportedRecv(recv *ast.FieldList) bool {
	t := recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.IsExported()
		default:
			return true
		}
	}
}
