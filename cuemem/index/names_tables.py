"""The name tables of `names`: nicknames, look-alike names of different people, generic labels, non-names."""

from __future__ import annotations


def _table(rows: str) -> dict[str, frozenset[str]]:
    """Parse "canonical: nick nick ..." lines into the nickname table."""
    out: dict[str, frozenset[str]] = {}
    for line in rows.strip().splitlines():
        head, _, tail = line.partition(":")
        out[head.strip()] = frozenset(tail.split())
    return out


# Common English given names and their nicknames / diminutives. A nickname may belong to several names
# ("sam": samuel, samantha); two names are equivalent when one group holds both.
NICKNAMES: dict[str, frozenset[str]] = _table(
    """
    abigail: abby abbie gail
    albert: al bert bertie
    alan: al
    allan: al
    alexander: alex alec xander lex sasha sandy
    alexandra: alex alexa lexi sasha sandra sandy
    alfred: alf al fred freddie
    amanda: mandy manda
    andrew: andy drew
    angela: angie
    anna: annie
    anne: ann annie nan nancy
    anthony: tony ant
    augustus: gus augie
    barbara: barb barbie babs
    benjamin: ben benny benji
    caleb: cal
    calvin: cal
    cameron: cam
    caroline: carrie caro carol carly
    carolyn: carrie carol lyn
    catherine: cathy cat kate katie cate
    charles: charlie chuck chas chaz
    charlotte: charlie lottie lotte
    christina: chris chrissy tina
    christine: chris chrissy tina
    christopher: chris kit topher
    cynthia: cindy
    daniel: dan danny
    danielle: dani elle
    david: dave davey davy
    deborah: deb debbie debby
    dominic: dom nic
    donald: don donnie
    dorothy: dot dottie dolly dora
    douglas: doug
    edward: ed eddie ted teddy ned
    eleanor: ellie nell nora elle
    elizabeth: liz lizzie lizzy beth betty bette betsy eliza libby elsie
    emily: em emmy millie
    emma: em emmy
    evangeline: eva angie vangie evie
    evelyn: evie eve lyn
    florence: flo flossie
    frances: fran frankie fanny
    francis: frank frankie fran
    frederick: fred freddie freddy fritz
    gabriel: gabe
    gabrielle: gabby gabi elle
    george: georgie
    georgina: gina georgie
    gerald: gerry jerry
    gregory: greg
    gwendolyn: gwen wendy
    harold: harry hal
    harrison: harry
    helen: nell nellie lena
    henry: harry hank hal
    isabel: bella izzy belle
    isabella: bella izzy isa belle
    jacob: jake jakey
    jacqueline: jackie jacqui
    james: jim jimmy jamie jimbo jem
    jeffrey: jeff
    jennifer: jen jenny jenn
    jerome: jerry
    jessica: jess jessie
    joanna: jo jojo joanie
    john: jon johnny jonny jack
    jonathan: jon jonny johnny nathan nate
    joseph: joe joey
    josephine: jo josie
    joshua: josh
    judith: judy jude
    kathryn: kate kathy katie
    katherine: kate kathy katie kat cat kitty
    kenneth: ken kenny
    kimberly: kim kimmy
    lawrence: larry
    leonard: leo len lenny
    lillian: lily lilly lil
    louis: lou louie
    louise: lou lulu
    madeline: maddie maddy
    margaret: maggie meg peggy marge madge greta margo
    martha: marty mattie
    martin: marty
    mary: molly polly mae mamie
    matthew: matt matty
    maximilian: max
    maxwell: max
    melanie: mel mellie
    melissa: mel missy lissa
    michael: mike mikey mick mickey
    michelle: shelly shelley
    miriam: mimi
    natalie: nat tally
    natasha: tasha tash nat
    nathan: nate
    nathaniel: nate nat nathan
    nicholas: nick nicky nico
    nicole: nicky nikki nic
    oliver: ollie olly
    olivia: liv livvy ollie
    pamela: pam
    patricia: pat patty trish tricia
    patrick: pat paddy
    penelope: penny
    peter: pete
    philip: phil
    phillip: phil
    rachel: rach rae
    randall: randy
    raymond: ray
    rebecca: becky becca bex
    regina: gina reggie
    richard: rick ricky rich richie dick
    robert: rob robbie bob bobby bert
    roger: rog
    ronald: ron ronnie
    samantha: sam sammy sammie
    samuel: sam sammy
    sarah: sally sadie sara
    sebastian: seb bastian
    sophia: sophie soph
    stephanie: steph stevie
    stephen: steve stevie
    steven: steve stevie
    susan: sue susie suzy
    suzanne: sue suzy
    teresa: terry tess tessa
    theodore: theo ted teddy
    theresa: terry tess tessa
    thomas: tom tommy
    timothy: tim timmy
    tobias: toby
    valerie: val
    veronica: ronnie vera
    victoria: vicky tori vic
    vincent: vince vinny
    virginia: ginny ginger
    walter: walt wally
    william: bill billy will willy willie liam
    zachary: zach zack zac
    """
)

# Pairs a character similarity would join but that name different people (mostly male/female forms).
DISTINCT_NAMES: frozenset[frozenset[str]] = frozenset(
    frozenset(pair.split("/"))
    for pair in """
    louis/louise daniel/danielle paul/paula eric/erica erik/erika mario/maria gabriel/gabrielle carl/carla
    karl/karla robert/roberta victor/victoria joseph/josephine patrick/patricia alexander/alexandra
    christian/christina christian/christine julian/juliana julian/julia francis/frances michael/michaela
    dean/deanna martin/martina justin/justine antonio/antonia nicolas/nicola george/georgia
    """.split()  # noqa: SIM905
)

# Speaker labels that name a role, not a person: matched only by exact mention, never by similarity.
GENERIC_LABELS: frozenset[str] = frozenset(
    "user assistant system me bot ai human narrator agent model you i host guest moderator".split()  # noqa: SIM905
)

# Capitalised words that are not person names: question words, auxiliaries, pronouns, sentence starters,
# titles and relations, days, months (May, June, April are names too; as months they are likelier in questions),
# holidays. Compared lower-cased.
NAME_STOPWORDS: frozenset[str] = frozenset(
    """
    what when where who whom whose why how which whatever whenever
    did do does done is are was were be been being am has have had can could would should will shall may might must
    i me my mine you your yours he him his she her hers it its we us our ours they them their theirs
    this that these those there here the a an and but or nor so if then than also too not no yes
    oh hi hey hello thanks thank please sorry well wow okay ok sure great good nice cool awesome yeah yep
    let lets don't can't won't didn't isn't doesn't wasn't aren't weren't haven't hasn't wouldn't couldn't
    i'm i've i'll i'd you're you've we're we've they're they've he'd she'd
    after before during since until because although though however maybe just really actually anyway
    today tonight tomorrow yesterday last next every some any all each many much more most other another
    one two three four five first second third new old
    mr mrs ms miss dr prof sir madam mister aunt uncle mom mum dad mother father grandma grandpa granny
    monday tuesday wednesday thursday friday saturday sunday
    january february march april may june july august september october november december
    christmas easter halloween thanksgiving
    speaker user assistant system
    """.split()  # noqa: SIM905
)

# Imperatives that open a sentence before a capitalised name ("Forget Garden Room, ...", "Scrap Hotel Mar"): the
# verb is no part of the name.
LEADING_VERBS: frozenset[str] = frozenset(
    """
    forget scrap scratch cancel drop replace switch change update move make put book add remove keep try ask call
    """.split()  # noqa: SIM905
)

TITLES = frozenset("mr mrs ms miss dr prof sir madam mister".split())  # noqa: SIM905


def _build_groups() -> dict[str, frozenset[str]]:
    """Map every name in NICKNAMES to the union of the groups that hold it."""
    acc: dict[str, set[str]] = {}
    for canonical, nicks in NICKNAMES.items():
        group = {canonical, *nicks}
        for name in group:
            acc.setdefault(name, set()).update(group)
    return {name: frozenset(group) for name, group in acc.items()}


NICKNAME_GROUPS = _build_groups()
