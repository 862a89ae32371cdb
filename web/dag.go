package web

import (
	"sort"
	"strconv"
	"unicode/utf8"
)

// A workflow's page draws its DAG as an SVG laid out by depth: a node's column is the longest
// path to it from a root, so every edge runs left to right, and within a column the nodes are
// ordered by their parents' mean row (one barycentre pass: fewer crossings, no search). Each node
// is a box coloured by its job's status that links to the job's page.

// Geometry of the drawing, in SVG user units.
const (
	dagPad    = 10
	dagNodeW  = 150
	dagNodeH  = 26
	dagColW   = 200 // a column's width: the box and the room its edges leave
	dagRowH   = 36
	dagLabel  = 18   // runes of a node's id shown in its box (the full id is in its tooltip)
	dagEdgeMx = 5000 // edges drawn at most: a page stays a page (the nodes are always drawn)
	dagWrap   = 25   // rows of a drawing without edges before it wraps into another column
)

// dagNode is a node's box.
type dagNode struct {
	WorkflowNode
	X, Y       int
	TextX      int // where its label starts
	TextY      int
	Label      string // the id, cut to dagLabel runes
	Link       string // its job's page
	Depth, Row int
}

// dagEdge is a parent-to-child curve: its SVG path.
type dagEdge struct{ D string }

// dagDrawing is the laid-out DAG.
type dagDrawing struct {
	Width, Height int
	Nodes         []dagNode
	Edges         []dagEdge
	// EdgesLeft is how many edges were not drawn (past dagEdgeMx).
	EdgesLeft int
	Depth     int // the number of columns
}

// layoutDAG lays nodes out; link is a job's page for a job id.
func layoutDAG(nodes []WorkflowNode, link func(jobID string) string) dagDrawing {
	index := make(map[string]int, len(nodes))
	for i, n := range nodes {
		index[n.ID] = i
	}
	depth := depths(nodes, index)
	cols := 0
	for _, d := range depth {
		cols = max(cols, d+1)
	}
	byCol := make([][]int, cols)
	for i, d := range depth {
		byCol[d] = append(byCol[d], i)
	}
	row := make([]int, len(nodes))
	for d, col := range byCol {
		if d > 0 {
			bary := make(map[int]float64, len(col))
			for _, i := range col {
				sum, k := 0.0, 0
				for _, p := range nodes[i].Parents {
					if j, ok := index[p]; ok {
						sum += float64(row[j])
						k++
					}
				}
				if k > 0 {
					bary[i] = sum / float64(k)
				}
			}
			sort.SliceStable(col, func(a, b int) bool { return bary[col[a]] < bary[col[b]] })
		}
		for r, i := range col {
			row[i] = r
		}
	}
	out := dagDrawing{Nodes: make([]dagNode, len(nodes)), Depth: cols}
	col := depth
	if cols == 1 && len(nodes) > dagWrap {
		// No edges at all (a batch): one column of up to 1,000 boxes would be a page tall; the
		// boxes wrap into columns of dagWrap instead.
		col = make([]int, len(nodes))
		for i := range nodes {
			col[i], row[i] = i/dagWrap, i%dagWrap
		}
	}
	rows, width := 0, 0
	for i, n := range nodes {
		x, y := dagPad+col[i]*dagColW, dagPad+row[i]*dagRowH
		width = max(width, col[i])
		out.Nodes[i] = dagNode{WorkflowNode: n, X: x, Y: y, TextX: x + 8, TextY: y + 17, Label: cut(n.ID, dagLabel), Link: link(n.JobID), Depth: depth[i], Row: row[i]}
		rows = max(rows, row[i]+1)
	}
	out.Width = 2*dagPad + width*dagColW + dagNodeW
	out.Height = 2*dagPad + max(rows-1, 0)*dagRowH + dagNodeH
	for i, n := range nodes {
		for _, p := range n.Parents {
			j, ok := index[p]
			if !ok {
				continue
			}
			if len(out.Edges) >= dagEdgeMx {
				out.EdgesLeft++
				continue
			}
			out.Edges = append(out.Edges, dagEdge{D: edgePath(out.Nodes[j], out.Nodes[i])})
		}
	}
	return out
}

// depths is each node's longest path from a root (Kahn's order over the parents). A node on a
// cycle (the engine refuses those) or under one stays at depth 0 rather than looping.
func depths(nodes []WorkflowNode, index map[string]int) []int {
	depth := make([]int, len(nodes))
	pending := make([]int, len(nodes))
	children := make([][]int, len(nodes))
	for i, n := range nodes {
		for _, p := range n.Parents {
			if j, ok := index[p]; ok {
				children[j] = append(children[j], i)
				pending[i]++
			}
		}
	}
	queue := make([]int, 0, len(nodes))
	for i, k := range pending {
		if k == 0 {
			queue = append(queue, i)
		}
	}
	for q := 0; q < len(queue); q++ {
		i := queue[q]
		for _, c := range children[i] {
			depth[c] = max(depth[c], depth[i]+1)
			if pending[c]--; pending[c] == 0 {
				queue = append(queue, c)
			}
		}
	}
	return depth
}

// edgePath is a curve from the right middle of from's box to the left middle of to's.
func edgePath(from, to dagNode) string {
	x1, y1 := from.X+dagNodeW, from.Y+dagNodeH/2
	x2, y2 := to.X, to.Y+dagNodeH/2
	mx := (x1 + x2) / 2
	itoa := strconv.Itoa
	return "M" + itoa(x1) + " " + itoa(y1) + "C" + itoa(mx) + " " + itoa(y1) + " " + itoa(mx) + " " + itoa(y2) + " " + itoa(x2) + " " + itoa(y2)
}

// cut shortens s to n runes, marking the cut with an ellipsis.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
