"""Who may do what: tokens kept in the job table, the roles they give per
project, and the twisted.cred checker that lets their holders in.

``roles`` says what an identity (a token's, the ``--username``'s, or
nobody's on an open loopback service) may see and do; ``tokens`` makes,
hashes and checks secrets; ``endpoints`` maps every path the site serves
to the rule that guards it; ``commands`` is ``netweir-serve token``.
"""
