// Command modproxy writes the published modules of the checkout into a
// file-based module proxy (the GOPROXY layout: <module>/@v/list,
// <version>.info, .mod and .zip), so that a module outside the workspace
// can be built against them as its users will build it:
//
//	go run ./.ci/modproxy -out DIR -sums FILE . adapters/etcd ...
//
// The arguments are the directories of the published modules, relative to
// the repository's root. The version is the one every module of the
// workspace requires of them; modproxy fails if two requirements disagree,
// since a release has one version for all its modules.
//
// A module's zip holds the files of its directory that git tracks or would
// track (git's ignore rules leave build artefacts out), read from the
// working tree, and never a file of a nested module. A module in a
// subdirectory that has no LICENSE gets the root's, as the go command does
// when it makes a zip from a repository.
//
// FILE receives the go.sum lines the modules must have in a dependent's
// go.sum, so that the caller can check the dependent was built from these
// zips and not from older ones in its module cache.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/sumdb/dirhash"
	"golang.org/x/mod/zip"
)

func main() {
	out := flag.String("out", "", "directory of the file-based module proxy to write (created)")
	sums := flag.String("sums", "", "file to write the modules' go.sum lines to")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: modproxy -out DIR [-sums FILE] moduledir...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *out == "" || flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*out, *sums, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

// published is one module to publish.
type published struct {
	dir   string // relative to the repository's root, "." for the root
	path  string // module path
	gomod []byte
}

func run(out, sumsFile string, dirs []string) error {
	root, err := gitOutput(".", "rev-parse", "--show-toplevel")
	if err != nil {
		return err
	}
	root = strings.TrimSpace(root)

	var mods []published
	for _, dir := range dirs {
		data, err := os.ReadFile(filepath.Join(root, dir, "go.mod"))
		if err != nil {
			return err
		}
		mods = append(mods, published{dir: path.Clean(dir), path: modfile.ModulePath(data), gomod: data})
	}
	version, err := releaseVersion(root, mods)
	if err != nil {
		return err
	}
	others, err := workspaceDirs(root)
	if err != nil {
		return err
	}
	info, err := versionInfo(root, version)
	if err != nil {
		return err
	}

	var sums bytes.Buffer
	for _, m := range mods {
		mv := module.Version{Path: m.path, Version: version}
		zipSum, summary, err := writeModule(root, out, m, mv, info, others)
		if err != nil {
			return fmt.Errorf("%s: %w", m.path, err)
		}
		modSum, err := dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(m.gomod)), nil
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(&sums, "%s %s %s\n%s %s/go.mod %s\n", m.path, version, zipSum, m.path, version, modSum)
		fmt.Fprintf(os.Stderr, "%s@%s: %s\n", m.path, version, summary)
	}
	if sumsFile != "" {
		if err := os.WriteFile(sumsFile, sums.Bytes(), 0o644); err != nil {
			return err
		}
	}
	fmt.Println(version)
	return nil
}

// releaseVersion returns the one version at which the modules of the
// workspace (published or not) require the published modules.
func releaseVersion(root string, mods []published) (string, error) {
	isPublished := make(map[string]bool)
	for _, m := range mods {
		isPublished[m.path] = true
	}
	dirs, err := workspaceDirs(root)
	if err != nil {
		return "", err
	}
	seen := make(map[string][]string) // version -> "dir requires path"
	for _, dir := range dirs {
		name := filepath.Join(root, dir, "go.mod")
		data, err := os.ReadFile(name)
		if err != nil {
			return "", err
		}
		f, err := modfile.ParseLax(name, data, nil)
		if err != nil {
			return "", err
		}
		for _, r := range f.Require {
			if isPublished[r.Mod.Path] {
				seen[r.Mod.Version] = append(seen[r.Mod.Version], dir+" requires "+r.Mod.Path)
			}
		}
	}
	if len(seen) != 1 {
		var lines []string
		for v, who := range seen {
			lines = append(lines, fmt.Sprintf("%s: %s", v, strings.Join(who, ", ")))
		}
		slices.Sort(lines)
		return "", fmt.Errorf("the modules must require the published modules at one release version, found %d:\n  %s",
			len(seen), strings.Join(lines, "\n  "))
	}
	var v string
	for v = range seen {
	}
	// v0.0.0 is the placeholder no proxy serves; a pre-release or build
	// suffix is no release.
	if semver.Canonical(v) != v || semver.Prerelease(v) != "" || v == "v0.0.0" {
		return "", fmt.Errorf("the published modules are required at %s, not a release version (vX.Y.Z above v0.0.0)", v)
	}
	return v, nil
}

// workspaceDirs returns the module directories go.work uses, relative to
// root, with a slash as separator.
func workspaceDirs(root string) ([]string, error) {
	name := filepath.Join(root, "go.work")
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	w, err := modfile.ParseWork(name, data, nil)
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, u := range w.Use {
		dirs = append(dirs, path.Clean(filepath.ToSlash(u.Path)))
	}
	return dirs, nil
}

// versionInfo is the .info file of every module: the version and the time
// of the commit checked out.
func versionInfo(root, version string) ([]byte, error) {
	out, err := gitOutput(root, "log", "-1", "--format=%cI")
	if err != nil {
		return nil, err
	}
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(out))
	if err != nil {
		return nil, err
	}
	return json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, t.UTC()})
}

// writeModule writes m's zip, .mod, .info and list into the proxy at out
// and returns the zip's go.sum hash and a one-line summary.
func writeModule(root, out string, m published, mv module.Version, info []byte, workspace []string) (string, string, error) {
	files, err := moduleFiles(root, m.dir)
	if err != nil {
		return "", "", err
	}
	checked, err := zip.CheckFiles(files)
	if err != nil {
		return "", "", err
	}
	// zip.Create leaves nested modules out; say so, and check that nothing
	// of another workspace module slipped in.
	var left []string
	for _, e := range checked.Omitted {
		left = append(left, e.Path)
	}
	for _, f := range checked.Valid {
		full := path.Join(m.dir, f)
		for _, other := range workspace {
			if other != m.dir && inDir(full, other) && !inDir(m.dir, other) {
				return "", "", fmt.Errorf("the zip would hold %s, a file of the module in %s", full, other)
			}
		}
	}

	escaped, err := module.EscapePath(mv.Path)
	if err != nil {
		return "", "", err
	}
	dir := filepath.Join(out, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	zipName := filepath.Join(dir, mv.Version+".zip")
	zf, err := os.Create(zipName)
	if err != nil {
		return "", "", err
	}
	if err := zip.Create(zf, mv, files); err != nil {
		zf.Close()
		return "", "", err
	}
	if err := zf.Close(); err != nil {
		return "", "", err
	}
	if _, err := zip.CheckZip(mv, zipName); err != nil {
		return "", "", err
	}
	for name, data := range map[string][]byte{
		mv.Version + ".mod":  m.gomod,
		mv.Version + ".info": info,
		"list":               []byte(mv.Version + "\n"),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return "", "", err
		}
	}
	sum, err := dirhash.HashZip(zipName, dirhash.Hash1)
	if err != nil {
		return "", "", err
	}
	st, err := os.Stat(zipName)
	if err != nil {
		return "", "", err
	}
	summary := fmt.Sprintf("%d files, %d KiB", len(checked.Valid), (st.Size()+1023)/1024)
	if len(left) > 0 {
		summary += fmt.Sprintf("; left out %d files of nested modules (%s)", len(left), strings.Join(nestedModules(left), ", "))
	}
	return sum, summary, nil
}

// moduleFiles lists the files of the module in dir (relative to root): the
// ones git tracks or would track, as they are in the working tree. Files of
// nested modules are listed too; zip.Create leaves them out by their go.mod.
func moduleFiles(root, dir string) ([]zip.File, error) {
	abs := filepath.Join(root, dir)
	out, err := gitOutput(abs, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", ".")
	if err != nil {
		return nil, err
	}
	var files []zip.File
	haveLicense := false
	for _, name := range strings.Split(out, "\x00") {
		if name == "" {
			continue
		}
		info, err := os.Lstat(filepath.Join(abs, name))
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the working tree, not yet in the index
		} else if err != nil {
			return nil, err
		}
		files = append(files, diskFile{slash: filepath.ToSlash(name), name: filepath.Join(abs, name), info: info})
		haveLicense = haveLicense || name == "LICENSE"
	}
	if !haveLicense && dir != "." {
		name := filepath.Join(root, "LICENSE")
		if info, err := os.Lstat(name); err == nil {
			files = append(files, diskFile{slash: "LICENSE", name: name, info: info})
		}
	}
	return files, nil
}

// diskFile is a file of the working tree under its path in the zip.
type diskFile struct {
	slash string
	name  string
	info  os.FileInfo
}

func (f diskFile) Path() string                 { return f.slash }
func (f diskFile) Lstat() (os.FileInfo, error)  { return f.info, nil }
func (f diskFile) Open() (io.ReadCloser, error) { return os.Open(f.name) }

// inDir reports whether the slash path p is dir or lies under it.
func inDir(p, dir string) bool {
	return dir == "." || p == dir || strings.HasPrefix(p, dir+"/")
}

// nestedModules returns the directories of the go.mod files among paths,
// sorted.
func nestedModules(paths []string) []string {
	var dirs []string
	for _, p := range paths {
		if path.Base(p) == "go.mod" {
			dirs = append(dirs, path.Dir(p))
		}
	}
	slices.Sort(dirs)
	return dirs
}

// gitOutput runs git in dir and returns its standard output.
func gitOutput(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}
