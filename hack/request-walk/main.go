// Copyright The peerdiscovery Authors.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

// Command request-walk reads a `dlv trace` of TestRequestWalk (pkg/filter)
// and prints the traced request's walk: each call of one of
// peerdiscovery's functions, in order, with its file, and how many times
// each file is entered (a run of consecutive calls in one file is one
// entry). Compiler-made wrappers (promoted methods, method values, type
// equality) and test code are left out: they are not code a reader
// follows. hack/request-walk.sh runs it. With -max-entries N it fails
// when a file is entered more than N times; with -max-calls N, when the
// walk has more than N calls.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

const module = "sigs.k8s.io/peerdiscovery/"

// call matches a traced call: "> goroutine(N): <package>.<function>(args".
var call = regexp.MustCompile(`^> goroutine\(\d+\): (sigs\.k8s\.io/peerdiscovery/[\w/]+)\.((?:\(\*?\w+\)\.)?[\w.]+(?:-fm)?)\(`)

// closure is the suffix dlv gives a function literal (".func1",
// ".func2.1") and the compiler's wrapper of a go or defer statement
// (".gowrap1", ".deferwrap1"): code of the function it is in.
var closure = regexp.MustCompile(`(\.(func|gowrap|deferwrap)\d+)+(\.\d+)*$`)

func main() {
	root := flag.String("root", ".", "the repository's root")
	maxEntries := flag.Int("max-entries", 0, "fail when a file is entered more often (0: no bound)")
	maxCalls := flag.Int("max-calls", 0, "fail when the walk has more calls (0: no bound)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: request-walk [-root DIR] [-max-entries N] [-max-calls N] TRACE")
		os.Exit(2)
	}
	steps, err := walk(flag.Arg(0), *root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "request-walk:", err)
		os.Exit(1)
	}
	for i, s := range steps {
		fmt.Printf("%2d  %-52s %s\n", i+1, s.function, s.file)
	}
	order, entries := fileEntries(steps)
	fmt.Printf("\n%d calls in %d files\n", len(steps), len(entries))
	failed := false
	for _, f := range order {
		mark := ""
		if *maxEntries > 0 && entries[f] > *maxEntries {
			mark, failed = fmt.Sprintf("   over %d", *maxEntries), true
		}
		fmt.Printf("  entered %dx  %s%s\n", entries[f], f, mark)
	}
	if *maxCalls > 0 && len(steps) > *maxCalls {
		fmt.Printf("%d calls, over %d\n", len(steps), *maxCalls)
		failed = true
	}
	if failed {
		os.Exit(1)
	}
}

type step struct{ function, file string }

// fileEntries counts how many times each file is entered: a run of
// consecutive calls in one file is one entry. order is the files in the
// order they are first entered.
func fileEntries(steps []step) (order []string, entries map[string]int) {
	entries = map[string]int{}
	prev := ""
	for _, s := range steps {
		if s.file != prev {
			if entries[s.file] == 0 {
				order = append(order, s.file)
			}
			entries[s.file]++
		}
		prev = s.file
	}
	return order, entries
}

// walk lists the calls between requestWalkMark("begin") and ("end").
func walk(trace, root string) ([]step, error) {
	f, err := os.Open(trace)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	files := map[string]map[string]string{} // package dir -> function -> file
	var steps []step
	in, done := false, false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, `requestWalkMark("begin")`) {
			in = true
			continue
		}
		if strings.Contains(line, `requestWalkMark("end")`) {
			done = true
			break
		}
		m := call.FindStringSubmatch(line)
		if !in || m == nil || strings.HasSuffix(m[2], "-fm") {
			continue
		}
		dir := strings.TrimPrefix(m[1], module)
		if files[dir] == nil {
			if files[dir], err = declarations(filepath.Join(root, dir)); err != nil {
				return nil, err
			}
		}
		file, ok := files[dir][closure.ReplaceAllString(m[2], "")]
		if !ok {
			continue // made by the compiler, or test code
		}
		steps = append(steps, step{function: filepath.Base(dir) + "." + m[2], file: filepath.Join(dir, file)})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !done {
		return nil, fmt.Errorf("%s: no traced request (requestWalkMark begin and end)", trace)
	}
	return steps, nil
}

// declarations maps each function and method declared in a package's
// non-test files, named as dlv names them ("F", "(*T).M", "T.M"), to
// its file.
func declarations(dir string) (map[string]string, error) {
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		// Files left out of this build (build constraints) may declare
		// the same names.
		if ok, err := build.Default.MatchFile(dir, filepath.Base(name)); err != nil || !ok {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			out[funcName(fd)] = filepath.Base(name)
		}
	}
	return out, nil
}

func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	star := ""
	if s, ok := t.(*ast.StarExpr); ok {
		star, t = "*", s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr: // a generic receiver
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	id, _ := t.(*ast.Ident)
	switch {
	case id == nil:
		return fd.Name.Name
	case star == "":
		return id.Name + "." + fd.Name.Name // dlv's name for a value receiver
	}
	return "(*" + id.Name + ")." + fd.Name.Name
}
