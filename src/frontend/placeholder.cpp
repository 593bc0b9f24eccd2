namespace qbc::frontend {}
