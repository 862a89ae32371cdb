package httpapi

import "context"

// nodeClaims are the identity claims of a workflow's or a batch's nodes whose task has one (an
// order: its tenant and order id bound to its content), claimed as the single route claims them.
// Without them a node reusing an order id with other content was created, and its job ended done
// as "already applied" (the order's operation key was applied) with its own content dropped.
type nodeClaims struct {
	claims []*identityClaim
	fields []string // each claim's node payload ("nodes[2].payload"), to name a conflict's field
	nodes  []string
}

// add keeps claim (nil: the node's task has no identity) of node, whose payload is field.
func (n *nodeClaims) add(claim *identityClaim, field, node string) {
	if claim != nil {
		n.claims, n.fields, n.nodes = append(n.claims, claim), append(n.fields, field), append(n.nodes, node)
	}
}

// take claims every node's identity, in one round trip, in the nodes' order; the first refusal
// (409: other content holds it; 503) is the answer, naming the node's field. What becomes of the
// claims taken, before it and after, is settle's (keepClaims).
func (n *nodeClaims) take(ctx context.Context) error {
	for i, err := range takeClaims(ctx, n.claims) {
		if err != nil {
			return nodeError(n.fields[i], n.nodes[i], err)
		}
	}
	return nil
}

// settle tells every claim whether it stays (keepClaims: the workflow was created or may have been,
// or was refused for its content) and removes the claims this request made when it does not.
func (n *nodeClaims) settle(ctx context.Context, kept bool) {
	for _, c := range n.claims {
		c.kept = kept
		c.settle(ctx)
	}
}
