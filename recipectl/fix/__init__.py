"""`recipectl fix`: the rules' mechanical fixes (declared with each rule, rules/registry.py),
written into recipe files with everything else kept as it was."""
