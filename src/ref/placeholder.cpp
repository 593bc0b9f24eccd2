namespace qbc::ref {}
