namespace qbc::config {}
