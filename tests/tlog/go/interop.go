// Checks a pith-pipeline transparency log with Go's golang.org/x/mod/sumdb
// packages, an implementation independent of ours: the checkpoint's note
// signature, the tiles (TileHashReader checks every tile it loads against the
// signed root), entry hashes, and proofs made by the Python code.
//
// Input (stdin, JSON): {"dir", "vkey", "inclusion": [{"index", "proof"}],
// "consistency": [{"old_size", "old_root", "proof"}]}. Prints one "ok" line per
// check; exits 1 naming the first failure.
package main

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io/ioutil"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

type input struct {
	Dir       string `json:"dir"`
	Vkey      string `json:"vkey"`
	Inclusion []struct {
		Index int64    `json:"index"`
		Proof []string `json:"proof"`
	} `json:"inclusion"`
	Consistency []struct {
		OldSize int64    `json:"old_size"`
		OldRoot string   `json:"old_root"`
		Proof   []string `json:"proof"`
	} `json:"consistency"`
}

type tiles struct{ dir string }

func (t tiles) Height() int { return 8 }

// C2SP paths are Go's without the hash-height element: tile/8/L/N -> tile/L/N
func (t tiles) path(tile tlog.Tile) string {
	return filepath.Join(t.dir, "tile/"+strings.TrimPrefix(tile.Path(), "tile/8/"))
}

func (t tiles) ReadTiles(ts []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(ts))
	for i, tile := range ts {
		data, err := ioutil.ReadFile(t.path(tile))
		if err != nil {
			return nil, err
		}
		out[i] = data
	}
	return out, nil
}

func (t tiles) SaveTiles([]tlog.Tile, [][]byte) {}

func fail(format string, args ...interface{}) {
	fmt.Printf("FAIL "+format+"\n", args...)
	os.Exit(1)
}

func hashes(b64s []string) tlog.TreeProof {
	var out []tlog.Hash
	for _, s := range b64s {
		raw, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(raw) != 32 {
			fail("bad hash %q", s)
		}
		var h tlog.Hash
		copy(h[:], raw)
		out = append(out, h)
	}
	return out
}

func entry(dir string, size, index int64) []byte {
	n := index / 256
	t := tlog.Tile{H: 8, L: -1, N: n, W: 256}
	if (n+1)*256 > size {
		t.W = int(size - n*256)
	}
	p := filepath.Join(dir, "tile/entries/"+strings.TrimPrefix(t.Path(), "tile/8/data/"))
	data, err := ioutil.ReadFile(p)
	if err != nil {
		fail("entry bundle: %v", err)
	}
	for i := int64(0); ; i++ {
		l := int(binary.BigEndian.Uint16(data))
		if i == index%256 {
			return data[2 : 2+l]
		}
		data = data[2+l:]
	}
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fail("input: %v", err)
	}
	verifier, err := note.NewVerifier(in.Vkey)
	if err != nil {
		fail("vkey: %v", err)
	}
	raw, err := ioutil.ReadFile(filepath.Join(in.Dir, "checkpoint"))
	if err != nil {
		fail("checkpoint: %v", err)
	}
	n, err := note.Open(raw, note.VerifierList(verifier))
	if err != nil {
		fail("note.Open: %v", err)
	}
	fmt.Println("ok note signature")
	lines := strings.Split(n.Text, "\n")
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || lines[0] != verifier.Name() {
		fail("checkpoint body %q", n.Text)
	}
	root := hashes([]string{lines[2]})[0]
	tree := tlog.Tree{N: size, Hash: root}
	reader := tlog.TileHashReader(tree, tiles{in.Dir})
	th, err := tlog.TreeHash(size, reader)
	if err != nil || th != root {
		fail("TreeHash from tiles: %v", err)
	}
	fmt.Println("ok tiles hash to the signed root")
	for _, inc := range in.Inclusion {
		leaf := tlog.RecordHash(entry(in.Dir, size, inc.Index))
		if err := tlog.CheckRecord(tlog.RecordProof(hashes(inc.Proof)), size, root, inc.Index, leaf); err != nil {
			fail("our inclusion proof for %d: %v", inc.Index, err)
		}
		own, err := tlog.ProveRecord(size, inc.Index, reader)
		if err != nil {
			fail("ProveRecord %d: %v", inc.Index, err)
		}
		if err := tlog.CheckRecord(own, size, root, inc.Index, leaf); err != nil {
			fail("Go's proof for %d: %v", inc.Index, err)
		}
		fmt.Printf("ok inclusion %d\n", inc.Index)
	}
	for _, c := range in.Consistency {
		old := hashes([]string{c.OldRoot})[0]
		if err := tlog.CheckTree(hashes(c.Proof), size, root, c.OldSize, old); err != nil {
			fail("consistency from %d: %v", c.OldSize, err)
		}
		fmt.Printf("ok consistency %d\n", c.OldSize)
	}
}
