package web

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A node's column is its longest path from a root: d, reached from a directly and through b and
// c, is drawn after c; every edge runs left to right; a column's nodes follow their parents' rows.
func TestLayoutDAGByDepth(t *testing.T) {
	t.Parallel()
	nodes := []WorkflowNode{
		{ID: "a", JobID: "ja"}, {ID: "z", JobID: "jz"},
		{ID: "b", JobID: "jb", Parents: []string{"a"}},
		{ID: "y", JobID: "jy", Parents: []string{"z"}},
		{ID: "c", JobID: "jc", Parents: []string{"b"}},
		{ID: "d", JobID: "jd", Parents: []string{"a", "c"}},
	}
	d := layoutDAG(nodes, func(id string) string { return "/jobs/" + id })
	depth := map[string]int{}
	for _, n := range d.Nodes {
		depth[n.ID] = n.Depth
		if n.Link != "/jobs/"+n.JobID {
			t.Fatalf("node %s links to %q", n.ID, n.Link)
		}
	}
	want := map[string]int{"a": 0, "z": 0, "b": 1, "y": 1, "c": 2, "d": 3}
	for id, w := range want {
		if depth[id] != w {
			t.Fatalf("depths %v, want %v", depth, want)
		}
	}
	if d.Depth != 4 || len(d.Edges) != 5 || d.EdgesLeft != 0 {
		t.Fatalf("drawing: %d columns, %d edges (%d left)", d.Depth, len(d.Edges), d.EdgesLeft)
	}
	// b follows a (row 0), y follows z (row 1).
	if d.Nodes[2].Row != 0 || d.Nodes[3].Row != 1 {
		t.Fatalf("b at row %d, y at row %d", d.Nodes[2].Row, d.Nodes[3].Row)
	}
	for _, n := range d.Nodes {
		if n.X+dagNodeW > d.Width || n.Y+dagNodeH > d.Height {
			t.Fatalf("node %s at (%d,%d) outside %dx%d", n.ID, n.X, n.Y, d.Width, d.Height)
		}
	}
}

// Past dagEdgeMx edges the drawing keeps every node and counts the edges it left out.
func TestLayoutDAGCapsEdges(t *testing.T) {
	t.Parallel()
	var nodes []WorkflowNode
	var roots []string
	for i := range 100 {
		id := "r" + string(rune('0'+i/10)) + string(rune('0'+i%10))
		nodes = append(nodes, WorkflowNode{ID: id})
		roots = append(roots, id)
	}
	for i := range 60 {
		nodes = append(nodes, WorkflowNode{ID: "c" + string(rune('0'+i/10)) + string(rune('0'+i%10)), Parents: roots})
	}
	d := layoutDAG(nodes, func(string) string { return "" })
	if len(d.Nodes) != 160 || len(d.Edges) != dagEdgeMx || d.EdgesLeft != 6000-dagEdgeMx {
		t.Fatalf("%d nodes, %d edges drawn, %d left", len(d.Nodes), len(d.Edges), d.EdgesLeft)
	}
}

// What a tenant wrote (a handler's error, a skip's reason, a type) is escaped wherever the
// workflow page shows it: in the SVG's tooltips and in the table.
func TestWorkflowPageEscapes(t *testing.T) {
	t.Parallel()
	evil := `<script>alert(1)</script>"'&`
	w := &Workflow{ID: "wf-1", Tenant: evil, Kind: "workflow", Status: "failed", CreatedAt: time.Now(), Nodes: []WorkflowNode{
		{ID: "a", JobID: "ja", Type: evil, Status: "failed", LastError: evil},
		{ID: "b", JobID: "jb", Type: "t", Status: "skipped", Parents: []string{"a"}, Why: evil},
		{ID: "c", JobID: "jc", Type: "t", Status: evil},
	}}
	d := layoutDAG(w.Nodes, func(id string) string { return "/m/jobs/" + id })
	var buf bytes.Buffer
	err := pageTemplates.ExecuteTemplate(&buf, "workflow.html", map[string]any{"Root": "/m", "W": w, "Drawing": d,
		"Counts": []statusCount{{evil, 1}}, "Problems": []dagNode{d.Nodes[0], d.Nodes[1]}, "Running": false, "Self": "/m/workflows/wf-1"})
	if err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	if strings.Contains(page, "<script>alert") || strings.Contains(page, `"'&<`) {
		t.Fatalf("tenant input unescaped:\n%s", page)
	}
	if strings.Count(page, "&lt;script&gt;alert(1)&lt;/script&gt;") < 5 {
		t.Fatalf("tenant input not shown escaped:\n%s", page)
	}
	if !strings.Contains(page, `class="st-unknown"`) {
		t.Fatalf("an unknown status is not drawn as unknown:\n%s", page)
	}
}

// BenchmarkWorkflowPageRender lays out and renders the page of a 1,000-node workflow (no Redis):
// what the UI adds to the two reads of a page.
func BenchmarkWorkflowPageRender(b *testing.B) {
	nodes := make([]WorkflowNode, 1000)
	for i := range nodes {
		id := "n" + strconv.Itoa(i)
		nodes[i] = WorkflowNode{ID: id, JobID: "job-" + id, Type: "rebuild-cache", Status: "held"}
		if i%50 != 0 {
			nodes[i].Parents = append(nodes[i].Parents, "n"+strconv.Itoa(i-1))
		}
		if i >= 50 {
			nodes[i].Parents = append(nodes[i].Parents, "n"+strconv.Itoa(i-50))
		}
	}
	w := &Workflow{ID: "wf-1", Tenant: "t1", Kind: "workflow", Status: "running", Nodes: nodes}
	var size int
	for b.Loop() {
		d := layoutDAG(w.Nodes, func(id string) string { return "/m/jobs/" + id })
		var buf bytes.Buffer
		if err := pageTemplates.ExecuteTemplate(&buf, "workflow.html", map[string]any{"Root": "/m", "W": w, "Drawing": d,
			"Running": true, "CanCancel": true, "Self": "/m/workflows/wf-1", "Refresh": 5}); err != nil {
			b.Fatal(err)
		}
		size = buf.Len()
	}
	b.ReportMetric(float64(size), "bytes/page")
}

// A workflow without edges (a batch) wraps into columns of dagWrap boxes instead of one column
// as tall as its nodes.
func TestLayoutDAGWrapsABatch(t *testing.T) {
	t.Parallel()
	nodes := make([]WorkflowNode, 60)
	for i := range nodes {
		nodes[i] = WorkflowNode{ID: "j" + strconv.Itoa(i)}
	}
	d := layoutDAG(nodes, func(string) string { return "" })
	if d.Height != 2*dagPad+(dagWrap-1)*dagRowH+dagNodeH || d.Width != 2*dagPad+2*dagColW+dagNodeW {
		t.Fatalf("60 boxes without edges drawn %dx%d", d.Width, d.Height)
	}
	if d.Nodes[26].X != dagPad+dagColW || d.Nodes[26].Y != dagPad+dagRowH {
		t.Fatalf("box 26 at (%d,%d)", d.Nodes[26].X, d.Nodes[26].Y)
	}
}
