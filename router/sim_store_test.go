package router

// The simulation's model store: staging and seal I/O that completes at a
// later step, files and pool slots. See sim_test.go.

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

type simFile uint8

const (
	simStaging simFile = iota + 1
	simSealed
	simFree        // pool mode: a slot no generation uses
	simQuarantined // pool mode: a slot a copying seal left (never reused here)
)

// holdsArtifact reports a file that some artifact must name.
func (f simFile) holdsArtifact() bool { return f == simStaging || f == simSealed }

// completeEffect finishes one staging or seal I/O, maybe failing it.
func (s *sim) completeEffect() bool {
	if len(s.effects) == 0 {
		return false
	}
	outcome := simIOOK
	switch s.rng.IntN(10) {
	case 0:
		outcome = simIOFails
	case 1:
		outcome = simIOMismatch
	}
	s.finishIO(s.rng.IntN(len(s.effects)), outcome)
	return true
}

// simIO is how a store operation ends.
type simIO int

const (
	simIOOK simIO = iota
	simIOFails
	simIOMismatch // seals only; staging just succeeds
)

// finishIO completes pending effect i as the shell would after the store's
// I/O.
func (s *sim) finishIO(i int, outcome simIO) {
	e := s.effects[i]
	s.effects = slices.Delete(s.effects, i, i+1)
	who := s.names[e.conn]
	if s.pool {
		s.finishPoolIO(e, who, outcome)
		return
	}
	switch e.kind {
	case effStage:
		if outcome == simIOFails {
			s.logf("store: staging %s for %s msg-%d fails", e.art.id, who, e.replyTo)
			s.stepCore(input{kind: inStaged, eff: e, err: errors.New("simulated staging failure")})
			return
		}
		s.fileSeq++
		path := fmt.Sprintf("stage-%04x", s.fileSeq)
		s.files[path] = simStaging
		s.logf("store: %s staged at %s for %s msg-%d", e.art.id, path, who, e.replyTo)
		s.stepCore(input{kind: inStaged, eff: e, loc: artLoc{relPath: path, gen: 1}})
	case effSeal:
		if s.files[e.relPath] != simStaging {
			s.fail("files", "seal of %q, which is not a staging file", e.relPath)
		}
		delete(s.files, e.relPath) // whatever the outcome, the staging file is gone
		switch outcome {
		case simIOFails:
			s.logf("store: seal of %s for %s msg-%d fails", e.art.id, who, e.replyTo)
			s.stepCore(input{kind: inSealed, eff: e, err: errors.New("simulated seal failure")})
		case simIOMismatch:
			s.logf("store: seal of %s for %s msg-%d finds a mismatch", e.art.id, who, e.replyTo)
			s.stepCore(input{kind: inSealed, eff: e, mismatch: true, err: errors.New("simulated digest mismatch")})
		default:
			s.fileSeq++
			path := fmt.Sprintf("sealed-%04x", s.fileSeq)
			s.files[path] = simSealed
			s.logf("store: %s sealed at %s for %s msg-%d", e.art.id, path, who, e.replyTo)
			s.stepCore(input{kind: inSealed, eff: e, loc: artLoc{relPath: path, gen: 1}})
		}
	default:
		s.fail("files", "unexpected effect kind %d", e.kind)
	}
}

// finishPoolIO is finishIO for a pooled store: slots are taken from the
// free ones of their size, sealed in place or (now and then) copied into
// another slot that is sealed instead, and recycled on collection.
func (s *sim) finishPoolIO(e effect, who string, outcome simIO) {
	switch e.kind {
	case effStage:
		if outcome == simIOFails {
			s.logf("store: staging for %s msg-%d fails", who, e.replyTo)
			s.stepCore(input{kind: inStaged, eff: e, err: errors.New("simulated staging failure")})
			return
		}
		path := s.takeSlot(uint64(e.size))
		s.logf("store: %s generation %d staged for %s msg-%d", path, s.slotGen[path], who, e.replyTo)
		s.stepCore(input{kind: inStaged, eff: e, loc: s.slotLoc(path)})
	case effSeal:
		if s.files[e.relPath] != simStaging {
			s.fail("slots", "seal of %q, which is not being written", e.relPath)
		}
		switch {
		case outcome != simIOOK:
			s.files[e.relPath] = simFree // the store recycles a slot whose seal failed
			s.logf("store: seal of %s for %s msg-%d fails", e.relPath, who, e.replyTo)
			s.stepCore(input{kind: inSealed, eff: e, mismatch: outcome == simIOMismatch, err: errors.New("simulated seal failure")})
		case s.rng.IntN(5) == 0:
			s.files[e.relPath] = simQuarantined // a writer kept it: copied elsewhere
			path := s.takeSlot(uint64(e.size))
			s.files[path] = simSealed
			s.logf("store: seal of %s copied into %s generation %d for %s msg-%d", e.relPath, path, s.slotGen[path], who, e.replyTo)
			s.stepCore(input{kind: inSealed, eff: e, loc: s.slotLoc(path)})
		default:
			s.files[e.relPath] = simSealed
			s.logf("store: %s sealed in place for %s msg-%d", e.relPath, who, e.replyTo)
			s.stepCore(input{kind: inSealed, eff: e, loc: s.slotLoc(e.relPath)})
		}
	default:
		s.fail("files", "unexpected effect kind %d", e.kind)
	}
}

// takeSlot hands out a free slot of size, or a new one, at its next
// generation.
func (s *sim) takeSlot(size uint64) string {
	for _, path := range slices.Sorted(maps.Keys(s.files)) {
		if s.files[path] == simFree && s.slotSize[path] == size {
			s.files[path] = simStaging
			s.slotGen[path]++
			return path
		}
	}
	s.fileSeq++
	path := fmt.Sprintf("slot-%016x", s.fileSeq)
	s.files[path], s.slotSize[path], s.slotGen[path] = simStaging, size, 1
	return path
}

func (s *sim) slotLoc(path string) artLoc {
	var n uint64
	fmt.Sscanf(path, "slot-%x", &n)
	return artLoc{relPath: path, slot: n, gen: s.slotGen[path]}
}

// usePool switches a new simulation to a pooled store.
func (s *sim) usePool() {
	s.pool, s.k.pool = true, true
	s.slotSize, s.slotGen = map[string]uint64{}, map[string]uint64{}
}

// filesInUse counts the store's files that hold an artifact.
func (s *sim) filesInUse() int {
	n := 0
	for _, f := range s.files {
		if f.holdsArtifact() {
			n++
		}
	}
	return n
}
