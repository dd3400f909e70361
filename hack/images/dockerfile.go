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

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Dockerfile is what the image checks compare with: the instructions of
// each stage, after line continuations and comments are removed.
type Dockerfile struct {
	Args   map[string]string // global ARG defaults
	Stages []Stage
}

// Stage is one FROM ... and its instructions.
type Stage struct {
	From, Name   string
	Instructions []Instruction
}

// Instruction is one line: the upper-cased command and its arguments as
// written.
type Instruction struct {
	Cmd, Args string
}

// ParseDockerfile reads the subset of the Dockerfile syntax this
// repository's Dockerfile uses: comments and parser directives, line
// continuations with a backslash, ARG, FROM [AS name], and any other
// instruction kept as written.
func ParseDockerfile(r io.Reader) (*Dockerfile, error) {
	df := &Dockerfile{Args: map[string]string{}}
	sc := bufio.NewScanner(r)
	var line strings.Builder
	n := 0
	for sc.Scan() {
		n++
		raw := sc.Text()
		t := strings.TrimSpace(raw)
		if line.Len() == 0 && (t == "" || strings.HasPrefix(t, "#")) {
			continue
		}
		if line.Len() > 0 && strings.HasPrefix(t, "#") {
			continue // a comment inside a continued instruction
		}
		if strings.HasSuffix(t, `\`) {
			line.WriteString(strings.TrimSuffix(t, `\`))
			line.WriteString(" ")
			continue
		}
		line.WriteString(t)
		cmd, args, _ := strings.Cut(strings.TrimSpace(line.String()), " ")
		line.Reset()
		cmd = strings.ToUpper(cmd)
		args = strings.Join(strings.Fields(args), " ")
		switch {
		case cmd == "FROM":
			f := strings.Fields(args)
			st := Stage{From: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.Name = f[2]
			} else if len(f) != 1 {
				return nil, fmt.Errorf("line %d: FROM %s: want IMAGE [AS NAME]", n, args)
			}
			df.Stages = append(df.Stages, st)
		case len(df.Stages) == 0 && cmd == "ARG":
			k, v, _ := strings.Cut(args, "=")
			df.Args[k] = v
		case len(df.Stages) == 0:
			return nil, fmt.Errorf("line %d: %s before the first FROM", n, cmd)
		default:
			st := &df.Stages[len(df.Stages)-1]
			st.Instructions = append(st.Instructions, Instruction{Cmd: cmd, Args: args})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if line.Len() > 0 {
		return nil, fmt.Errorf("the last instruction ends with a line continuation")
	}
	if len(df.Stages) == 0 {
		return nil, fmt.Errorf("no FROM")
	}
	return df, nil
}

// Final is the last stage, the image.
func (df *Dockerfile) Final() Stage { return df.Stages[len(df.Stages)-1] }

// Last is the argument of the stage's last instruction cmd ("" if none):
// later USER or ENTRYPOINT lines override earlier ones.
func (s Stage) Last(cmd string) string {
	out := ""
	for _, in := range s.Instructions {
		if in.Cmd == cmd {
			out = in.Args
		}
	}
	return out
}

// All are the arguments of every instruction cmd, in order.
func (s Stage) All(cmd string) []string {
	var out []string
	for _, in := range s.Instructions {
		if in.Cmd == cmd {
			out = append(out, in.Args)
		}
	}
	return out
}

// Entrypoint is the final ENTRYPOINT in exec form (a JSON array); the
// shell form would need a shell, which the image must not have.
func (s Stage) Entrypoint() ([]string, error) {
	raw := s.Last("ENTRYPOINT")
	if raw == "" {
		return nil, nil
	}
	var out []string
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		return nil, fmt.Errorf("ENTRYPOINT %s is not in exec form (a JSON array): %w", raw, err)
	}
	return out, nil
}

// ExposedPorts are the EXPOSE ports as the image config writes them
// (6443 -> 6443/tcp).
func (s Stage) ExposedPorts() []string {
	var out []string
	for _, a := range s.All("EXPOSE") {
		for _, p := range strings.Fields(a) {
			if !strings.Contains(p, "/") {
				p += "/tcp"
			}
			out = append(out, p)
		}
	}
	return out
}

// Copy is one COPY instruction.
type Copy struct {
	From     string // --from stage, "" for the build context
	Src, Dst string
}

// Copies are the stage's COPY instructions (one source each).
func (s Stage) Copies() ([]Copy, error) {
	var out []Copy
	for _, a := range s.All("COPY") {
		var c Copy
		var paths []string
		for _, f := range strings.Fields(a) {
			if v, ok := strings.CutPrefix(f, "--from="); ok {
				c.From = v
				continue
			}
			if strings.HasPrefix(f, "--") {
				return nil, fmt.Errorf("COPY %s: flag %s not understood", a, f)
			}
			paths = append(paths, f)
		}
		if len(paths) != 2 {
			return nil, fmt.Errorf("COPY %s: want one source and one destination", a)
		}
		c.Src, c.Dst = paths[0], paths[1]
		out = append(out, c)
	}
	return out, nil
}
