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

package adminview

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/duration"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
)

// ANSI styles; used only when the output is a terminal.
const (
	plain  = ""
	bold   = "\x1b[1m"
	green  = "\x1b[32m"
	yellow = "\x1b[33m"
	red    = "\x1b[31m"
	dim    = "\x1b[2m"
	reset  = "\x1b[0m"
)

type cell struct{ text, style string }

// printer writes tables padded on the visible text, so colors do not
// shift columns (text/tabwriter counts escape bytes as width).
type printer struct {
	w     io.Writer
	color bool
	err   error
}

func (p *printer) printf(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

func (p *printer) styled(c cell) string {
	if !p.color || c.style == plain {
		return c.text
	}
	return c.style + c.text + reset
}

func (p *printer) heading(title, detail string) {
	p.printf("%s\n", strings.TrimRight(p.styled(cell{title, bold})+"  "+detail, " "))
}

func (p *printer) table(rows [][]cell) {
	var widths []int
	for _, r := range rows {
		for i, c := range r {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(c.text))
		}
	}
	for _, r := range rows {
		var b strings.Builder
		for i, c := range r {
			b.WriteString(p.styled(c))
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c.text)+2))
			}
		}
		p.printf("%s\n", strings.TrimRight(b.String(), " "))
	}
}

func headerRow(names ...string) []cell {
	out := make([]cell, len(names))
	for i, n := range names {
		out[i] = cell{n, bold}
	}
	return out
}

// WriteStatus renders the status as one screen; now dates the last syncs.
func WriteStatus(w io.Writer, st Status, now time.Time, color bool) error {
	p := &printer{w: w, color: color}
	ready := 0
	for _, s := range st.Servers {
		if s.Ready {
			ready++
		}
	}
	p.heading("SERVERS", fmt.Sprintf("%d known, %d ready", len(st.Servers), ready))
	rows := [][]cell{headerRow("KEY", "NAME", "VERSION", "READY", "LAST SYNC", "RESOURCES", "ENDPOINT")}
	for _, s := range st.Servers {
		sync := "never"
		if s.LastSync != nil {
			sync = duration.HumanDuration(now.Sub(*s.LastSync)) + " ago"
		}
		if s.Stale {
			sync += " (stale)"
		}
		rows = append(rows, []cell{{s.Key, bold}, {s.Name, plain}, {s.Version, plain}, readyCell(s), {sync, plain}, {fmt.Sprint(s.Resources), plain}, {s.Endpoint, plain}})
	}
	p.table(rows)

	p.printf("\n")
	keyOf := map[string]string{}
	for _, s := range st.Servers {
		keyOf[s.ServerID] = s.Key
	}
	if len(st.Skew) == 0 {
		p.heading("SKEW", fmt.Sprintf("none: every server serves all %d GVRs", st.Routes))
	} else {
		p.heading("SKEW", fmt.Sprintf("%d of %d GVRs are not served by every server", len(st.Skew), st.Routes))
		header := []cell{{"GVR", bold}}
		for _, s := range st.Servers {
			header = append(header, cell{s.Key, bold})
		}
		rows = [][]cell{header}
		for _, r := range st.Skew {
			row := []cell{{r.GVR, plain}}
			for i, c := range r.Cells {
				row = append(row, decisionCell(c, st.Servers[i], keyOf))
			}
			rows = append(rows, row)
		}
		p.table(rows)
		p.printf("(local: served by that server; -> X: proxied to server X first; 503: no server serving it is ready)\n")
	}

	p.printf("\n")
	type pair struct{ from, to string }
	var order []pair
	counts := map[pair]int{}
	for _, r := range st.Skew {
		for i, c := range r.Cells {
			if c.Decision != v1alpha1.RouteProxy {
				continue
			}
			k := pair{st.Servers[i].Key, keyOf[c.To]}
			if counts[k] == 0 {
				order = append(order, k)
			}
			counts[k]++
		}
	}
	if len(order) == 0 {
		p.heading("PROXIED", "nothing: each server serves every GVR it is asked for, or none can")
		return p.err
	}
	p.heading("PROXIED", "requests a server does not serve, to the peer it tries first")
	slices.SortFunc(order, func(a, b pair) int { return cmp.Or(cmp.Compare(a.from, b.from), cmp.Compare(a.to, b.to)) })
	rows = nil
	for _, k := range order {
		rows = append(rows, []cell{{"  " + k.from, bold}, {"->", yellow}, {k.to, bold}, {gvrs(counts[k]), plain}})
	}
	p.table(rows)
	return p.err
}

func gvrs(n int) string {
	if n == 1 {
		return "1 GVR"
	}
	return fmt.Sprintf("%d GVRs", n)
}

func readyCell(s Server) cell {
	switch {
	case s.Left:
		return cell{"left", dim}
	case s.Ready:
		return cell{"yes", green}
	case s.Reason != "":
		return cell{"no (" + s.Reason + ")", red}
	}
	return cell{"no", red}
}

func decisionCell(c Cell, s Server, keyOf map[string]string) cell {
	switch c.Decision {
	case v1alpha1.RouteLocal:
		return cell{"local", green}
	case v1alpha1.RouteProxy:
		to := keyOf[c.To]
		if to == "" {
			to = c.To
		}
		return cell{"-> " + to, yellow}
	case v1alpha1.RouteUnavailable:
		return cell{"503", red}
	case v1alpha1.RouteNotFound:
		return cell{"404", dim}
	}
	if s.Left {
		return cell{"left", dim}
	}
	return cell{"?", plain}
}

// WriteDrain renders a drain what-if.
func WriteDrain(w io.Writer, d Drain, color bool) error {
	p := &printer{w: w, color: color}
	keyOf := map[string]string{}
	for _, s := range d.Servers {
		keyOf[s.ServerID] = s.Key
	}
	names := make([]string, len(d.Drained))
	for i, s := range d.Drained {
		names[i] = fmt.Sprintf("%s (%s %s)", s.Key, s.Name, s.Version)
	}
	p.printf("If %s went away now:\n\n", strings.Join(names, " and "))
	p.section("503", "no GVR would be left without a ready server",
		" would have no ready server left; requests for them on these servers would get 503:", moveRows(d.Unavailable, keyOf, red))
	p.section("FAIL OVER", "no proxied GVR would move",
		" would fail over; requests for them on these servers would go to:", moveRows(d.FailOver, keyOf, yellow))
	p.heading("SERVERS", "")
	rows := [][]cell{}
	for _, s := range d.Servers {
		state := readyCell(s)
		if slices.ContainsFunc(d.Drained, func(x Server) bool { return x.ServerID == s.ServerID }) {
			state = cell{"drained in this what-if", bold}
		}
		rows = append(rows, []cell{{"  " + s.Key, bold}, {s.Name, plain}, {s.Version, plain}, state})
	}
	p.table(rows)
	return p.err
}

// section is a heading saying how many GVRs, and their table, then a
// blank line; or the heading saying there is none.
func (p *printer) section(title, none, some string, rows [][]cell) {
	if n := len(rows) - 1; n == 0 {
		p.heading(title, none)
	} else {
		p.heading(title, gvrs(n)+some)
		p.table(rows)
	}
	p.printf("\n")
}

func moveRows(rows []DrainRow, keyOf map[string]string, style string) [][]cell {
	key := func(id string) string {
		if k := keyOf[id]; k != "" {
			return k
		}
		return id
	}
	out := [][]cell{headerRow("  GVR", "ON")}
	for _, r := range rows {
		var moves []string
		for _, m := range r.Moves {
			if m.To == "" {
				moves = append(moves, key(m.Server))
			} else {
				moves = append(moves, key(m.Server)+" -> "+key(m.To))
			}
		}
		out = append(out, []cell{{"  " + r.GVR, style}, {strings.Join(moves, ", "), plain}})
	}
	return out
}

// WriteExplain renders a RouteReview's answer as a sentence and the
// candidates.
func WriteExplain(w io.Writer, e Explain, color bool) error {
	p := &printer{w: w, color: color}
	style := map[v1alpha1.RouteDecision]string{
		v1alpha1.RouteLocal: green, v1alpha1.RouteProxy: yellow,
		v1alpha1.RouteUnavailable: red, v1alpha1.RouteNotFound: dim,
	}[e.Review.Decision]
	p.printf("%s %s\n", p.styled(cell{string(e.Review.Decision), style + bold}), e.Sentence)
	if len(e.Candidates) == 0 {
		return p.err
	}
	title := "the other servers listed for the GVR" // the source is never a candidate
	if e.Review.Decision == v1alpha1.RouteProxy {
		title = "in the order tried"
	}
	p.printf("\n")
	p.heading("CANDIDATES", title)
	rows := [][]cell{headerRow("  #", "NAME", "VERSION", "READY", "ENDPOINT")}
	for i, s := range e.Candidates {
		rows = append(rows, []cell{{fmt.Sprintf("  %d", i+1), plain}, {s.Name, plain}, {s.Version, plain}, readyCell(s), {s.Endpoint, plain}})
	}
	p.table(rows)
	return p.err
}
