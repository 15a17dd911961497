"""The watch screen (`WatchScreen`) and the modal screens over it: help, the explain panel and the diff panel."""
