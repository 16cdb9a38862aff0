// Command apicompat reports, for each published module, the API changes
// since the module's previous release, as golang.org/x/exp/apidiff sees
// them:
//
//	go run ./.ci/apicompat -version v0.2.0 . adapters/etcd ...
//
// The arguments are the directories of the modules, relative to the
// repository's root; a module in directory d is tagged d/vX.Y.Z (the root
// module vX.Y.Z). The previous release is the highest such tag below
// -version. A module with none has nothing to compare and is said so.
//
// The old release is read from its tag (git archive), the new one from the
// working tree; both are type-checked with GOWORK=off, each module on its
// own. The report is for the person who tags the release: incompatible
// changes belong in CHANGELOG.md, and in a new major version from v1 on.
// apicompat fails only if it cannot make the report, or with -strict if an
// incompatible change is found.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/exp/apidiff"
	"golang.org/x/mod/semver"
	"golang.org/x/tools/go/packages"
)

func main() {
	version := flag.String("version", "", "the version being released (vX.Y.Z)")
	strict := flag.Bool("strict", false, "fail if a change is incompatible")
	flag.Parse()
	if !semver.IsValid(*version) || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: apicompat -version vX.Y.Z [-strict] moduledir...")
		os.Exit(2)
	}
	incompatible, err := run(os.Stdout, *version, flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicompat:", err)
		os.Exit(1)
	}
	if incompatible && *strict {
		fmt.Fprintln(os.Stderr, "apicompat: incompatible changes (see above)")
		os.Exit(1)
	}
}

// run writes the report of each module to w and says whether a change is
// incompatible.
func run(w io.Writer, version string, dirs []string) (bool, error) {
	root, err := git(".", "rev-parse", "--show-toplevel")
	if err != nil {
		return false, err
	}
	root = strings.TrimSpace(root)
	tmp, err := os.MkdirTemp("", "apicompat-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(tmp)

	incompatible := false
	extracted := make(map[string]string) // tag -> the tree it was read into
	for _, dir := range dirs {
		dir = path.Clean(dir)
		prefix := ""
		if dir != "." {
			prefix = dir + "/"
		}
		tag, err := previousTag(root, prefix, version)
		if err != nil {
			return false, err
		}
		if tag == "" {
			fmt.Fprintf(w, "%s: no release before %s (no tag %sv*): nothing to compare\n", dir, version, prefix)
			continue
		}
		tree, ok := extracted[tag]
		if !ok {
			tree = filepath.Join(tmp, fmt.Sprint(len(extracted)))
			if err := extract(root, tag, tree); err != nil {
				return false, err
			}
			extracted[tag] = tree
		}
		oldMod, err := load(filepath.Join(tree, dir))
		if err != nil {
			return false, fmt.Errorf("%s at %s: %w", dir, tag, err)
		}
		newMod, err := load(filepath.Join(root, dir))
		if err != nil {
			return false, fmt.Errorf("%s in the working tree: %w", dir, err)
		}
		report := apidiff.ModuleChanges(oldMod, newMod)
		fmt.Fprintf(w, "%s: changes since %s\n", newMod.Path, tag)
		if len(report.Changes) == 0 {
			fmt.Fprintln(w, "(none)")
		} else if err := report.Text(w); err != nil {
			return false, err
		}
		for _, c := range report.Changes {
			incompatible = incompatible || !c.Compatible
		}
	}
	return incompatible, nil
}

// previousTag returns the highest tag prefix+vX.Y.Z below version, or ""
// if there is none.
func previousTag(root, prefix, version string) (string, error) {
	out, err := git(root, "tag", "--list", prefix+"v*")
	if err != nil {
		return "", err
	}
	best := ""
	for _, tag := range strings.Fields(out) {
		v := strings.TrimPrefix(tag, prefix)
		if !semver.IsValid(v) || strings.Contains(v, "/") || semver.Compare(v, version) >= 0 {
			continue
		}
		if best == "" || semver.Compare(v, strings.TrimPrefix(best, prefix)) > 0 {
			best = tag
		}
	}
	return best, nil
}

// extract writes the tree of the tag into dir.
func extract(root, tag, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	archive := exec.Command("git", "archive", "--format=tar", tag)
	archive.Dir = root
	archive.Stderr = os.Stderr
	untar := exec.Command("tar", "-x", "-C", dir)
	untar.Stderr = os.Stderr
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return err
	}
	untar.Stdin = pipe
	if err := untar.Start(); err != nil {
		return err
	}
	if err := archive.Run(); err != nil {
		return fmt.Errorf("git archive %s: %w", tag, err)
	}
	if err := untar.Wait(); err != nil {
		return fmt.Errorf("tar: %w", err)
	}
	return nil
}

// load type-checks the non-internal packages of the module in dir.
func load(dir string) (*apidiff.Module, error) {
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedTypes | packages.NeedModule,
		Dir:  dir,
		Env:  append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false"),
	}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		return nil, err
	}
	var errs []error
	m := &apidiff.Module{}
	for _, p := range pkgs {
		for _, e := range p.Errors {
			errs = append(errs, e)
		}
		if p.Module == nil || isInternal(p.PkgPath) {
			continue
		}
		m.Path = p.Module.Path
		m.Packages = append(m.Packages, p.Types)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(m.Packages) == 0 {
		return nil, errors.New("no packages")
	}
	return m, nil
}

// isInternal reports whether importers outside the module are kept from p.
func isInternal(p string) bool {
	return strings.HasSuffix(p, "/internal") || strings.Contains(p, "/internal/")
}

// git runs git in dir and returns its standard output.
func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}
