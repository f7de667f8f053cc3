-- snapshot_busy: whether an item's line is between two halves of a change a
-- snapshot must not cut: a draw half applied (the prelude's drawing), or
-- admissions written to the line but not yet on waitroom.admissions (a
-- rebuild from the snapshot would hold admissions the record never got).
-- Run first in the MULTI that reads the line for a snapshot (Line.Dump).
-- KEYS[1] wr:{item}:drawn  KEYS[2] wr:{item}:applied  KEYS[3] wr:{item}:unpublished
-- Returns 1 when busy, else 0.
if drawing(KEYS[1], KEYS[2]) or redis.call('LLEN', KEYS[3]) > 0 then
  return 1
end
return 0
