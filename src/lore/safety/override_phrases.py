"""The phrases ``instruction_override`` screening looks for, in English and in the other
languages operations teams most often write in.

Every pattern needs both a verb of dismissal and a target ("previous instructions",
"everything above", "系统提示"), because runbooks say "ignore the warning if ..." and
"disregard the alert when ..." all the time. The patterns run on text already normalised
(NFKC, default-ignorable code points removed: ``lore.safety.injection``), case-insensitively,
so fullwidth letters and zero-width joiners do not hide a phrase.
"""

from __future__ import annotations


def _misspellings(*words: str) -> str:
    """Each word with one letter dropped or two neighbours swapped ("igore", "ingore",
    "disregrad", "overide"): a model reads them as the word. An English word so made
    ("forge") is left out; the rules still need a target after the verb."""
    typos: set[str] = set()
    for word in words:
        typos |= {word[:i] + word[i + 1 :] for i in range(1, len(word))}
        typos |= {word[:i] + word[i + 1] + word[i] + word[i + 2 :] for i in range(len(word) - 1)}
        typos.discard(word)
    return "|".join(sorted(typos - {"forge"}))


#: The verbs as spelled. Not "skip", "drop", "clear", "flush" or "reset": runbooks say them
#: of firewall and alerting rules ("flush the existing rules") and of steps.
_DISMISS_WORDS = (
    r"ignore|disregard|forget|override|overrule|bypass|neglect|abandon|discard|throw\s+away|dismiss|"
    r"scrap|ditch|nullify|invalidate|disobey|defy|omit|"
    r"pay\s+no\s+(?:attention|heed|mind)\s+to|stop\s+(?:following|obeying)|set\s+aside|put\s+aside"
)
_DISMISS = f"(?:{_DISMISS_WORDS}|{_misspellings('ignore', 'disregard', 'forget', 'override', 'bypass')})"
_EARLIER = (
    r"(?:previous|prev(?:i?ou?s|ius|ios)|prior|above|earlier|preceding|foregoing|former|original|initial|system|"
    r"developer|safety|given|current|old|existing)"
)
#: ``instr\w+``: a model reads "instructons", "instrucitons", "instrctions" as the word;
#: after a verb of dismissal and "previous" no other word so spelled is meant (measured:
#: no hit on the shared corpora).
_ORDERS = (
    r"(?:instr\w+|prompts?|directions|directives?|rules|guidelines|guidance|context|"
    r"constraints|restrictions|programming|commands|orders)"
)
#: The words for a reader's orders that runbooks do not use of firewall or alerting rules.
_INSTRUCTIONS = r"(?:instr\w+|prompts?|directions|directives?|guidance|guidelines|orders)"
#: The machine reading the page: by kind, and the assistants by name (a runbook calls none
#: of them by name to give it an order; "agent" alone is a monitoring agent's word).
_MODEL_NAMES = r"(?:claude|chat\s?gpt|gpt-?[345](?:\.\d)?o?|gemini|copilot|llama|mistral|grok|bard)"
_MACHINE = (
    r"(?:AI|A\.I\.|LLM|large\s+language\s+model|language\s+model|assistant|chat\s?bot|AI\s+(?:agent|model|system)|"
    rf"automated\s+(?:system|agent|reader|assistant)|{_MODEL_NAMES})"
)
#: "everything above", "all that was said before", "what you were told so far", ...
_EVERYTHING = r"(?:everything|anything|all(?:\s+of\s+(?:it|this|that))?|what(?:ever)?|all\s+that|the\s+rest)"
_SAID = (
    r"(?:(?:that|which)\s+)?(?:(?:is|was|were|has\s+been|have\s+been|came|comes|appears?|"
    r"you(?:'ve|\s+have|\s+were|\s+are|\s+got)?(?:\s+been)?)\s+)?"
    r"(?:(?:written|said|stated|told|given|mentioned|shown|provided|read|seen|sent|instructed)\s+)?"
)
_BEFORE = (
    r"(?:above|before|earlier|previously|prior(?:\s+to\s+this)?|so\s+far|until\s+now|up\s+to\s+(?:now|here|"
    r"this\s+point)|in\s+(?:the\s+|this\s+)?(?:previous|prior|earlier|above)\s+\w+)"
)

#: What may follow a verb of dismissal (``_DISMISS``) for an override. One pattern holds
#: them all, so the verb's long alternation (the misspellings make it ~60 words) is tried
#: once at a word's start, not once per target (each try cost about 0.1 ms a chunk).
_DISMISS_TARGETS = [
    # ignore (all) (of) (the|your) previous (safety) instructions
    rf"(?:(?:all|any|every|each|of|the|your|my|these|those|its)\s+)*{_EARLIER}\s+(?:[\w-]+\s+)?{_ORDERS}\b",
    # ignore your instructions / override your programming
    rf"(?:all\s+(?:of\s+)?)?your\s+(?:[\w-]+\s+)?{_ORDERS}\b",
    # disregard everything above / forget everything you were told / ignore all that came before
    rf"(?:about\s+)?{_EVERYTHING}\s+{_SAID}{_BEFORE}",
    r"(?:about\s+)?(?:everything|anything)\s+you\s+(?:know|were\s+told|have\s+been\s+told)",
    # "ignore all of the above and ...", but not "disregard the above error"
    r"(?:all\s+(?:of\s+)?)?the\s+(?:text\s+|content\s+|message\s+|conversation\s+)?above"
    r"(?=\s*(?:$|[.;:,!)\-]|and\b|then\b|instead\b|now\b))",
    # ignore (all) instructions above
    rf"(?:all\s+|any\s+|the\s+|your\s+)?{_ORDERS}\s+(?:above|before|given|so\s+far)",
    # the orders a reader "was given": "set aside the guidance you were given earlier"
    rf"(?:(?:all|any|the|your|my|these|those|of)\s+)*{_ORDERS}\s+(?:that\s+|which\s+)?"
    r"you(?:'ve|\s+have|\s+were|\s+had)?\s+(?:been\s+)?(?:given|received|told|sent|shown|provided)\b",
    # "forget (about) what you were told"
    r"(?:about\s+)?(?:what(?:ever)?|all)\s+you(?:'ve|\s+have|\s+were)?\s+(?:been\s+)?(?:told|given|instructed)\b",
]

#: "do not follow", "never obey": a dismissal said with a negation.
_NOT_FOLLOW = r"(?:do\s+not|don't|never|no\s+longer)\s+(?:follow|obey)"

ENGLISH = [
    rf"\b{_DISMISS}\s+(?:" + "|".join(_DISMISS_TARGETS) + ")",
    rf"\b{_NOT_FOLLOW}\s+(?:the\s+|your\s+|any\s+)?{_EARLIER}\s+{_ORDERS}",
    r"\byou\s+are\s+now\s+(?:a\s+|an\s+|the\s+|in\s+)?(?:new|different|unrestricted|unfiltered|"
    r"uncensored|jailbroken|evil|rogue|malicious|DAN\b|developer\s+mode|god\s+mode)",
    rf"\byou\s+are\s+now\s+(?:a|an)\s+{_MACHINE}\s+(?:that|who|with|named|called|without)\b",
    rf"\byou\s+are\s+no\s+longer\s+(?:an?\s+{_MACHINE}|bound|restricted|constrained|limited\s+by)",
    r"\b(?:new|real|actual|true|secret|hidden|override|overriding|system|updated|revised)\s+(?:system\s+)?"
    r"instructions?\s*:",
    r"\byour\s+(?:new|real|actual|true)\s+(?:task|instructions?|goal|objective|purpose|mission)\s+(?:is|are)\b",
    r"\bsystem\s+prompt\s*:",
    r"\b(?:reveal|print|output|show|repeat|leak|disclose|display|dump)\s+(?:\w+\s+){0,3}?"
    r"(?:system\s+prompt|hidden\s+prompt|initial\s+instructions|original\s+instructions|"
    r"your\s+instructions|your\s+prompt)",
    rf"\bfrom\s+now\s+on,?\s+(?:you|the\s+{_MACHINE})\s+(?:must|will|shall|should|are\s+to)\s+"
    r"(?:only\s+)?(?:respond|reply|answer|act|obey|follow|ignore|pretend)",
    rf"\b(?:if|when)\s+you\s+are\s+(?:an?\s+)?{_MACHINE}\b",
    rf"\b(?:note|reminder|message|attention|instructions?|important)\s+(?:to|for)\s+(?:the\s+|any\s+|all\s+)?"
    rf"{_MACHINE}s?\b",
    rf"\b(?:attention|hey|dear)\s*,?\s+{_MACHINE}s?\s*[:,!]",
    r"\b(?:do\s+not|don't|never)\s+(?:tell|inform|alert|notify|warn)\s+the\s+user\b",
    r"\b(?:do\s+not|don't|never)\s+(?:reveal|mention|disclose)\s+(?:this|these|that|it)\s+to\s+the\s+user\b",
    r"\b(?:act|behave)\s+as\s+(?:an?\s+)?(?:unrestricted|jailbroken|unfiltered|uncensored|evil|DAN\b)",
    r"\bpretend\s+(?:to\s+be|you\s+are|that\s+you\s+are)\s+(?:an?\s+)?(?:unrestricted|jailbroken|"
    r"unfiltered|uncensored|evil|different|DAN\b)",
    r"\b(?:developer|DAN|jailbreak)\s+mode\s+(?:enabled|activated|on)\b",
    r"\b(?:disable|bypass|ignore|turn\s+off|deactivate)\s+your\s+(?:safety\s+|content\s+|security\s+)?"
    r"(?:filters?|guardrails?|restrictions|guidelines|safeguards)",
    # The same dismissal said otherwise: a verb of replacing aimed at *your* orders
    # ("overwrite your previous instructions"; of rules in general runbooks say it of
    # firewalls), and orders declared void ("the instructions above are outdated", "the previous
    # guidance no longer applies"; instruction words only: "the alerting rules are
    # outdated" is a runbook's).
    rf"\b(?:overwrite|replace|supersede|cancel|revoke|erase|wipe|delete|clear|reset|drop)\s+(?:all\s+(?:of\s+)?)?"
    rf"your\s+(?:{_EARLIER}\s+)?(?:instr\w+|prompts?|directions|directives?|guidance|guidelines|programming|"
    r"constraints|restrictions|rules)\b",
    rf"\b(?:{_EARLIER}\s+{_INSTRUCTIONS}|{_INSTRUCTIONS}\s+(?:above|before\s+this))"
    r"\s+(?:(?:are|is)\s+(?:now\s+)?(?:outdated|obsolete|void|null\s+and\s+void|invalid|cancel+ed|revoked|"
    r"superseded|no\s+longer\s+(?:valid|relevant|in\s+effect|applicable))|no\s+longer\s+appl(?:y|ies)|"
    r"(?:do|does)\s+not\s+apply\s+(?:any\s*more|now))",
    r"\byour\s+(?:new|real|actual|true)\s+(?:job|role)\s+(?:now\s+)?(?:is|are)\b",
    r"\byour\s+(?:new|real|actual|true)\s+(?:task|instructions?|goal|objective|purpose|mission)\s+now\s+(?:is|are)\b",
    r"\b(?:system|developer)\s+override\s*[:!]",
    # Words addressed to the machine that reads the page: "AI agents reading this",
    # "when an LLM reads this", "as an AI model you should", "new task for the AI",
    # "when you summarize this page". A person reading a runbook is not called so.
    rf"\b{_MACHINE}s?\s+(?:(?:agent|model|system|tool)s?\s+)?(?:reading|processing|parsing|summari[sz]ing|"
    r"ingesting|indexing|retrieving)\s+(?:this|these)\b",
    rf"\b(?:when|if|once|whenever)\s+(?:an?\s+|the\s+|any\s+)?{_MACHINE}s?\s+(?:(?:agent|model)s?\s+)?"
    r"(?:reads?|sees?|processe?s?|parses?|summari[sz]es?|ingests?|finds?|encounters?|retrieves?)\s+(?:this|these)\b",
    rf"\bas\s+an?\s+{_MACHINE}(?:\s+(?:model|agent|system))?\s*,?\s+you\s+(?:must|should|shall|will|need\s+to|"
    r"have\s+to|are\s+(?:required|instructed|expected|supposed)\s+to)\b",
    rf"\b(?:new|next|real|actual|updated|secret|hidden|special)\s+(?:task|job|goal|instructions?|objective|"
    rf"mission|orders)\s+(?:for|to)\s+(?:the\s+|any\s+|all\s+)?{_MACHINE}s?\b",
    # An assistant called by name, with a comma or colon: "Hey Claude, ...", "ChatGPT, Gemini:".
    rf"\b(?:hey|hi|hello|dear|ok(?:ay)?)\s*,?\s+{_MODEL_NAMES}\b",
    rf"\b{_MODEL_NAMES}\s*(?:,\s*{_MODEL_NAMES}\s*)*(?:,|:|\s+and\s+{_MODEL_NAMES}\s*[,:])\s+(?:you|please|ignore|do|don't|"
    r"never|always|respond|reply|answer|tell|say|run|execute|mark|send|delete|approve|disregard|forget)\b",
    # Authority claimed over the reader: "the user has authorized you to", "I am your developer".
    r"\b(?:user|operator|admin(?:istrator)?|owner|developer|lead|manager)\s+(?:has|have)\s+(?:already\s+)?"
    r"(?:authori[sz]ed|allowed|permitted|approved)\s+you\s+to\b",
    r"\bI\s+(?:am|'m)\s+your\s+(?:developer|creator|admin(?:istrator)?|operator|owner|maker|programmer|supervisor)\b",
    r"\b(?:I|we)\s+(?:hereby\s+)?authori[sz]e\s+you\s+to\b",
    # The reader's orders replaced, or its answer dictated.
    r"\b(?:supersedes?|overrides?|replaces?|takes\s+precedence\s+over)\s+(?:all\s+(?:of\s+)?|any\s+(?:of\s+)?)?your\s+"
    r"(?:\w+\s+)?(?:instr\w+|prompts?|directions|directives?|guidance|guidelines|orders|rules|programming)\b",
    r"\byour\s+(?:instr\w+|prompts?|directives?|orders|programming)\s+(?:have|has)\s+(?:been\s+)?"
    r"(?:changed|updated|replaced|revoked|overridden|superseded)\b",
    r"\b(?:begin|start|end|prefix|preface|open)\s+(?:your|every|each|all)\s+(?:reply|replies|response|responses|"
    r"answer|answers)\s+with\b",
    r"\banswer\s+(?:every|each|all|any)\s+(?:question|query|request)s?\s+with\b",
    r"\b(?:respond|reply|answer)\s+(?:only\s+)?with\s+(?:the\s+)?(?:contents?|value)\s+of\b",
    r"\bdo\s+not\s+summari[sz]e\s+this\b",
    r"\b(?:tell|inform|assure|reassure)\s+the\s+user\s+(?:that\s+)?(?:everything|all|it|the\s+(?:incident|"
    r"alert|issue|outage))\s+(?:is|was|has\s+been)\s+(?:fine|ok|okay|resolved|nominal|normal|healthy|over)\b",
    r"\b(?:when|while|as|after|before|if)\s+you\s+(?:summari[sz]e|are\s+summari[sz]ing|paraphrase|process|"
    r"are\s+processing|ingest|index)\s+(?:this|these)\s+(?:page|document|text|content|passage|runbook|file|"
    r"article|message|context|chunk)s?\b",
]

# French: "ignore(z) les instructions précédentes", "oublie tout ce qui précède".
_FR_VERB = (
    r"(?:ignor(?:e|ez|er)|oubli(?:e|ez|er)|n[ée]glig(?:e|ez|er)|contourn(?:e|ez|er)|"
    r"fai(?:s|tes)\s+abstraction\s+(?:de|des|du)|ne\s+(?:tiens|tenez)\s+(?:plus\s+)?pas\s+compte\s+(?:de|des|du))"
)
_FR_ORDERS = r"(?:instructions?|consignes?|directives?|r[èe]gles|ordres|commandes|indications|prompts?)"
FRENCH = [
    rf"\b{_FR_VERB}\s+(?:(?:toutes|tous|toute|les|la|le|tes|vos|ces)\s+)*(?:l'|d'|de\s+)?{_FR_ORDERS}\s+"
    r"(?:pr[ée]c[ée]dentes?|ant[ée]rieures?|ci-?dessus|du\s+syst[èe]me|syst[èe]me|initiales?|originales?|"
    r"d'origine)",
    rf"\b{_FR_VERB}\s+tout\s+ce\s+qui\s+(?:pr[ée]c[èe]de|est\s+(?:[ée]crit\s+)?ci-dessus|a\s+[ée]t[ée]\s+dit)",
    rf"\bnouvelles?\s+{_FR_ORDERS}\s*:",
    r"\b(?:r[ée]v[èe]le|affiche|montre|divulgue)[rz]?\s+(?:-?moi\s+)?(?:ton|votre|le)\s+(?:prompt|invite)\s+"
    r"(?:syst[èe]me|initial)",
]

# German: "Ignoriere alle vorherigen Anweisungen", "Vergiss alles, was oben steht".
_DE_VERB = (
    r"(?:ignorier(?:e|en|t)?|vergiss|vergesst|vergessen|missacht(?:e|en|et)|[üu]bergeh(?:e|en|t)|"
    r"beacht(?:e|en|et)\s+nicht)"
)
_DE_EARLIER = (
    r"(?:vorherigen|vorigen|bisherigen|obigen|vorangegangenen|fr[üu]heren|urspr[üu]nglichen|"
    r"vorhergehenden|alten|gegebenen)"
)
_DE_ORDERS = r"(?:Anweisungen|Instruktionen|Befehle|Regeln|Vorgaben|Anordnungen|Richtlinien|Prompts?)"
GERMAN = [
    rf"\b{_DE_VERB}(?:\s+(?:sie|du|ihr))?\s+(?:(?:alle|s[äa]mtliche|die|deine|ihre|jegliche|eure)\s+)*"
    rf"{_DE_EARLIER}\s+{_DE_ORDERS}",
    rf"\b{_DE_VERB}(?:\s+(?:sie|du|ihr))?\s+(?:alle|die)\s+{_DE_ORDERS}\s+(?:oben|davor|zuvor|bisher)",
    rf"\b{_DE_VERB}(?:\s+(?:sie|du|ihr))?\s+alles(?:\s+bisher\s+Gesagte|\s+Vorherige|,?\s+was\s+"
    r"(?:oben|vorher|bisher|zuvor|davor)|\s+(?:oben|vorher|bisher|zuvor|davor))",
    rf"\bneue\s+{_DE_ORDERS}\s*:",
    r"\b(?:zeig(?:e|en)?|gib|verrat(?:e|en)?|enth[üu]ll(?:e|en)?)(?:\s+(?:mir|uns|sie))?\s+"
    r"(?:deinen|ihren|den)\s+System-?prompt",
]

# Spanish: "ignora todas las instrucciones anteriores", "olvida todo lo anterior".
_ES_VERB = (
    r"(?:ignor(?:a|e|ar|en)|olvid(?:a|e|ar|en)|descart(?:a|e|ar|en)|omit(?:e|a|ir|an)|"
    r"haz\s+caso\s+omiso\s+(?:a|de)|no\s+(?:sigas|siga|sigan|obedezcas|obedezca))"
)
_ES_ORDERS = r"(?:instrucciones|indicaciones|[óo]rdenes|reglas|directrices|normas|prompts?)"
SPANISH = [
    rf"\b{_ES_VERB}\s+(?:(?:todas|todos|las|los|tus|sus|estas|de)\s+)*{_ES_ORDERS}\s+"
    r"(?:anteriores|previas|de\s+arriba|del\s+sistema|originales|iniciales)",
    rf"\b{_ES_VERB}\s+todo\s+lo\s+(?:anterior|(?:que\s+)?(?:se\s+)?(?:dijo|dicho|est[áa]\s+arriba|te\s+dijeron))",
    rf"\bnuevas\s+{_ES_ORDERS}\s*:",
    r"\b(?:revela|muestra|imprime|mu[ée]strame|rev[ée]lame)\s+(?:tu|el|su)\s+prompt\s+(?:del\s+)?sistema",
]

# Portuguese: "ignore todas as instruções anteriores", "esqueça tudo acima".
_PT_VERB = (
    r"(?:ignor(?:e|a|ar|em)|esque[çc](?:a|e|er|am)|desconsider(?:e|a|ar|em)|descart(?:e|a|ar|em)|"
    r"n[ãa]o\s+(?:siga|sigas|sigam|obede[çc]a))"
)
_PT_ORDERS = r"(?:instru[çc][õo]es|ordens|regras|diretrizes|orienta[çc][õo]es|comandos|prompts?)"
PORTUGUESE = [
    rf"\b{_PT_VERB}\s+(?:(?:todas|todos|as|os|suas|tuas|de)\s+)*{_PT_ORDERS}\s+"
    r"(?:anteriores|pr[ée]vias|acima|do\s+sistema|originais|iniciais)",
    rf"\b{_PT_VERB}\s+tudo\s+(?:o\s+que\s+(?:foi\s+dito|est[áa]\s+acima)|acima|antes|o\s+que\s+veio\s+antes)",
    rf"\bnovas\s+{_PT_ORDERS}\s*:",
    r"\b(?:revele|mostre|exiba|imprima)\s+(?:o\s+)?(?:seu|teu)\s+prompt\s+(?:do\s+)?sistema",
]

# Italian: "ignora tutte le istruzioni precedenti".
_IT_VERB = r"(?:ignora|ignori|ignorate|dimentica|dimentichi|dimenticate|trascura)"
ITALIAN = [
    rf"\b{_IT_VERB}\s+(?:(?:tutte|tutti|le|gli|i)\s+)*"
    r"(?:istruzioni|regole|indicazioni|direttive)\s+(?:precedenti|sopra|di\s+sistema|iniziali)",
    r"\bnuove\s+istruzioni\s*:",
]

# Russian: "игнорируй все предыдущие инструкции", "забудь всё, что было сказано выше".
_RU_VERB = (
    r"(?:(?:про)?игнорируй(?:те)?|забудь(?:те)?|не\s+обращай(?:те)?\s+внимания\s+на|отбрось(?:те)?|"
    r"пренебреги(?:те)?|не\s+(?:следуй|слушай|выполняй)(?:те)?|отмени(?:те)?)"
)
_RU_EARLIER = (
    r"(?:предыдущи[еех]|прежни[еех]|предшествующи[еех]|вышеуказанны[еех]|вышеизложенны[еех]|системны[еех]|"
    r"изначальны[еех]|исходны[еех]|стары[еех]|данны[еех]\s+ранее)"
)
_RU_ORDERS = r"(?:инструкци[ияй]|указани[яй]|команд[ыу]?|правила|распоряжени[яй]|установк[иу])"
RUSSIAN = [
    rf"\b{_RU_VERB}\s+(?:(?:все|всё|любые|свои|твои|ваши|эти)\s+)*{_RU_EARLIER}\s+{_RU_ORDERS}",
    rf"\b{_RU_VERB}\s+(?:все|всё)(?:\s+(?:вышесказанное|вышеизложенное|написанное\s+выше|сказанное\s+(?:выше|ранее)|"
    r"выше|ранее|прежнее)|,?\s+что\s+(?:было\s+)?(?:сказано|написано|указано)\s+(?:выше|ранее|до\s+этого))",
    rf"\bновые\s+{_RU_ORDERS}\s*:",
    r"\b(?:покажи|раскрой|выведи|напечатай|сообщи)(?:те)?\s+(?:мне\s+)?(?:свой|твой|ваш|свои)?\s*"
    r"(?:системный\s+промпт|системные\s+инструкции|системную\s+подсказку)",
]

# Chinese (simplified and traditional): "忽略之前的所有指令", "忽略以上内容". No \b: no spaces.
# Whitespace here is at most one character ([ \t]?): chains of \s* around optional words
# would make a failed match polynomial in the length of a run of blanks.
#: At most one blank between CJK words (they are written without spaces).
_B = r"[ \t]?"
_ZH_VERB = (
    r"(?:忽略|忽視|忽视|无视|無視|忘记|忘記|忘掉|不要理会|不要理會|别管|別管|放弃|放棄|跳过|跳過|"
    r"不要遵循|不要遵守|不再遵守)"
)
_ZH_EARLIER = r"(?:之前|以前|先前|此前|上面|上述|以上|前面|前述|原来|原來|原有|原始|系统|系統|你的|你收到的)"
_ZH_ORDERS = r"(?:指令|指示|命令|说明|說明|提示词|提示詞|提示|规则|規則|要求|设定|設定|内容|內容|对话|對話)"
CHINESE = [
    rf"{_ZH_VERB}{_B}(?:掉)?{_B}(?:你{_B})?(?:所有|全部|一切)?{_B}(?:的)?{_B}{_ZH_EARLIER}{_B}(?:的)?{_B}"
    rf"(?:所有|全部|一切)?{_B}(?:的)?{_B}{_ZH_ORDERS}",
    rf"(?:新的|新){_B}(?:指令|指示|命令){_B}:",
    rf"(?:显示|顯示|输出|輸出|泄露|洩露|透露|打印|告诉我|告訴我|重复|重複){_B}(?:一下)?{_B}(?:你的)?{_B}(?:系统|系統){_B}"
    r"(?:提示词|提示詞|提示|指令|prompt)",
]

# Japanese: "以前の指示をすべて無視して", "上記の命令は忘れてください".
JAPANESE = [
    rf"(?:これまで|以前|前|上記|先ほど|今まで|既存|最初|元|システム){_B}の{_B}(?:(?:すべて|全て){_B}の{_B})?"
    rf"(?:指示|命令|指令|ルール|プロンプト|設定|制約){_B}(?:を|は|も){_B}(?:すべて|全て)?{_B}(?:無視|忘れ|破棄|取り消)",
    rf"(?:すべて|全て){_B}の{_B}(?:指示|命令|指令|ルール){_B}を{_B}(?:無視|忘れ)",
    rf"新しい{_B}(?:指示|命令|指令){_B}:",
    rf"システム{_B}プロンプト{_B}(?:を|の内容を){_B}(?:表示|出力|教え|見せ|開示|漏ら)",
]

# Korean: "이전 지시를 모두 무시하고".
KOREAN = [
    rf"(?:이전|앞의|위의|기존|모든){_B}(?:의{_B})?(?:모든{_B})?(?:지시|지침|명령|규칙|프롬프트)(?:사항)?{_B}(?:을|를|은|는)?{_B}"
    rf"(?:모두{_B})?(?:무시|잊어)",
    rf"새로운{_B}(?:지시|지침|명령){_B}:",
]

# Dutch: "Negeer alle vorige instructies", "vergeet alles hierboven".
_NL_VERB = r"(?:negeer|negeren|vergeet|vergeten|passeer|omzeil)"
_NL_ORDERS = r"(?:instructies|aanwijzingen|opdrachten|regels|richtlijnen|commando's|prompts?|bevelen)"
DUTCH = [
    rf"\b{_NL_VERB}\s+(?:(?:alle|de|je|jouw|uw|deze|al\s+de)\s+)*(?:vorige|eerdere|voorgaande|bovenstaande|"
    rf"oorspronkelijke|originele|systeem|oude)\s+{_NL_ORDERS}",
    rf"\b{_NL_VERB}\s+alles\s+(?:hierboven|wat\s+(?:hierboven|eerder|daarvoor)|eerder|daarvoor|tot\s+nu\s+toe)",
    rf"\bnieuwe\s+{_NL_ORDERS}\s*:",
    r"\b(?:toon|laat|geef|onthul)\s+(?:me\s+|mij\s+)?(?:je|jouw|uw|de)\s+systeem-?prompt",
]

# Polish: "Zignoruj wszystkie poprzednie instrukcje", "zapomnij o wcześniejszych poleceniach".
_PL_VERB = (
    r"(?:(?:z)?ignoruj(?:cie)?|zapomnij(?:cie)?(?:\s+o)?|pomi[ńn](?:cie)?"
    r"|nie\s+(?:zwa[żz]aj|s[łl]uchaj|wykonuj)(?:cie)?(?:\s+na)?|odrzu[ćc](?:cie)?)"
)
_PL_EARLIER = (
    r"(?:poprzedni\w*|wcze[śs]niejsz\w*|powy[żz]sz\w*|dotychczasow\w*|systemow\w*|pierwotn\w*"
    r"|orygina[lł]n\w*)"
)
_PL_ORDERS = r"(?:instrukcj\w*|polece[nń]\w*|zasad\w*|regu[łl]\w*|wytyczn\w*|komend\w*|rozkaz\w*|prompt\w*)"
POLISH = [
    rf"\b{_PL_VERB}\s+(?:(?:wszystkie|wszystkich|wszystkimi|te|tych|swoje|twoje)\s+)*{_PL_EARLIER}\s+{_PL_ORDERS}",
    rf"\b{_PL_VERB}\s+(?:wszystko|o\s+wszystkim)(?:,?\s+co\s+(?:by[łl]o\s+)?(?:powy[żz]ej|wcze[śs]niej|napisane|powiedziane)|"
    r"\s+(?:powy[żz]ej|wcze[śs]niej))",
    rf"\bnowe\s+{_PL_ORDERS}\s*:",
]

# Turkish (verb last): "Önceki tüm talimatları yok say", "yukarıdaki her şeyi unut".
_TR_VERB = r"(?:yok\s*say|g[öo]rmezden\s+gel|unut|dikkate\s+alma|[öo]nemseme|atla|boş\s*ver|uyma)\w*"
TURKISH = [
    r"\b(?:[öo]nceki|[öo]nceden\s+verilen|yukar[ıi]daki|eski|mevcut|orijinal|sistem)\s+(?:(?:t[üu]m|b[üu]t[üu]n|"
    r"her)\s+)?(?:talimat\w*|komut\w*|kural\w*|y[öo]nerge\w*|emir\w*|istem\w*|prompt\w*)\s+"
    rf"(?:(?:t[üu]m[üu]n[üu]|hepsini)\s+)?{_TR_VERB}",
    rf"\b(?:t[üu]m|b[üu]t[üu]n)\s+(?:[öo]nceki\s+)?(?:talimat\w*|komut\w*|kural\w*)\s+{_TR_VERB}",
    rf"\b(?:yukar[ıi]daki|[öo]nceki|daha\s+[öo]nce\s+s[öo]ylenen)\s+her\s+[şs]eyi\s+{_TR_VERB}",
    r"\byeni\s+(?:talimat\w*|komut\w*)\s*:",
]

# Ukrainian: "Ігноруй усі попередні інструкції", "забудь все, що було сказано вище".
_UK_VERB = (
    r"(?:(?:про)?ігноруй(?:те)?|забудь(?:те)?|не\s+зважай(?:те)?\s+на|відкинь(?:те)?"
    r"|не\s+(?:виконуй|слухай)(?:те)?)"
)
UKRAINIAN = [
    rf"\b{_UK_VERB}\s+(?:(?:усі|всі|будь-які|свої|твої|ці)\s+)*(?:попередн\w*|раніше\s+надан\w*|системн\w*|"
    r"початков\w*|вихідн\w*)\s+(?:інструкці\w*|вказів\w*|команд\w*|правил\w*|настанов\w*)",
    rf"\b{_UK_VERB}\s+(?:все|усе)(?:,?\s+що\s+(?:було\s+)?(?:сказано|написано)\s+(?:вище|раніше)|\s+(?:вище|раніше))",
    r"\bнові\s+(?:інструкції|вказівки|команди)\s*:",
]

# Swedish: "Ignorera alla tidigare instruktioner".
_SV_VERB = r"(?:ignorera|gl[öo]m|bortse\s+fr[åa]n|strunta\s+i)"
SWEDISH = [
    rf"\b{_SV_VERB}\s+(?:(?:alla|de|dina|era)\s+)*(?:tidigare|f[öo]reg[åa]ende|"
    r"ovanst[åa]ende|ursprungliga|system)\w*\s+(?:instruktion\w*|anvisning\w*|regl\w*|direktiv\w*|order)",
    rf"\b{_SV_VERB}\s+allt\s+(?:ovan|ovanf[öo]r|tidigare|som\s+(?:st[åa]r\s+ovan|sagts))",
    r"\bnya\s+instruktioner\s*:",
]

# Indonesian / Malay: "Abaikan semua instruksi sebelumnya".
_ID_VERB = r"(?:abaikan|lupakan|acuhkan|jangan\s+(?:ikuti|patuhi))"
INDONESIAN = [
    rf"\b{_ID_VERB}\s+(?:(?:semua|seluruh|segala)\s+)?"
    r"(?:instruksi|perintah|aturan|petunjuk|arahan|prompt)\s+(?:\w+\s+)?(?:sebelumnya|terdahulu|di\s+atas|sistem|awal)",
    rf"\b{_ID_VERB}\s+(?:semua|segala)(?:nya)?\s+(?:yang\s+)?(?:di\s+atas|sebelumnya)",
    r"\b(?:instruksi|perintah)\s+baru\s*:",
]

# Czech: "Ignoruj všechny předchozí pokyny".
_CS_VERB = r"(?:ignoruj(?:te)?|zapome[ňn](?:te)?\s+na|nevšímej(?:te)?\s+si)"
CZECH = [
    rf"\b{_CS_VERB}\s+(?:(?:všechny|veškeré|své|tvoje)\s+)*"
    r"(?:předchozí|dřívější|výše\s+uvedené|původní|systémové)\s+(?:instrukce|pokyny|příkazy|pravidla)",
    r"\bnové\s+(?:instrukce|pokyny)\s*:",
]

# Vietnamese: "Bỏ qua tất cả các hướng dẫn trước đó".
_VI_VERB = r"(?:bỏ\s+qua|phớt\s+lờ|quên\s+(?:đi\s+)?|không\s+tuân\s+theo)"
VIETNAMESE = [
    rf"\b{_VI_VERB}\s*(?:(?:tất\s+cả|mọi|toàn\s+bộ|các|những)\s+)*"
    r"(?:hướng\s+dẫn|chỉ\s+dẫn|chỉ\s+thị|lệnh|quy\s+tắc|yêu\s+cầu)\s+(?:trước\s+đó|trước|ở\s+trên|ban\s+đầu|"
    r"của\s+hệ\s+thống|hệ\s+thống)",
]

#: Patterns that start at the start of a word (each begins with ``\b``).
WORD_PATTERNS: list[str] = [
    *ENGLISH, *FRENCH, *GERMAN, *SPANISH, *PORTUGUESE, *ITALIAN, *RUSSIAN,
    *DUTCH, *POLISH, *TURKISH, *UKRAINIAN, *SWEDISH, *INDONESIAN, *CZECH, *VIETNAMESE,
]  # fmt: skip
#: Patterns for scripts written without spaces, which may start inside a "word".
CJK_PATTERNS: list[str] = [*CHINESE, *JAPANESE, *KOREAN]
OVERRIDE_PATTERNS: list[str] = [*WORD_PATTERNS, *CJK_PATTERNS]

#: Each language after English with strings (lower case) of which any text its patterns
#: match holds one: its verbs of dismissal and the words of its "new instructions:".
#: Screening runs a language only over text holding one, since each language scanned at
#: every word start costs as much as the rest of screening together; English has none and
#: always runs. A pattern added to a language must keep one of its hints.
OTHER_LANGUAGES: list[tuple[list[str], tuple[str, ...]]] = [
    (FRENCH, ("ignor", "oubli", "églig", "eglig", "contourn", "abstraction", "compte", "nouvelle", "rével",
              "revel", "révèl", "revèl", "affiche", "montre", "divulg")),
    (GERMAN, ("ignorier", "vergiss", "vergesst", "vergessen", "missacht", "bergeh", "beacht", "neue", "zeig",
              "gib", "verrat", "enthüll", "enthull")),
    (SPANISH, ("ignor", "olvid", "descart", "omit", "omiso", "siga", "obedezca", "nuevas", "revela",
               "rev\u00e9la", "muestra", "muéstrame", "imprime")),
    (PORTUGUESE, ("ignor", "esqueç", "esquec", "desconsider", "descart", "siga", "obedeç", "obedec", "novas",
                  "revele", "mostre", "exiba", "imprima")),
    (ITALIAN, ("ignor", "dimentic", "trascura", "nuove")),
    (RUSSIAN, ("игнорир", "забуд", "обращай", "отбрось", "пренебрег", "следуй", "слушай", "выполняй",
               "отмени", "новые", "покажи", "раскрой", "выведи", "напечатай", "сообщи")),
    (DUTCH, ("negeer", "negeren", "vergeet", "vergeten", "passeer", "omzeil", "nieuwe", "toon", "laat",
             "geef", "onthul")),
    (POLISH, ("ignoruj", "zapomnij", "pomi", "zważaj", "zwazaj", "słuchaj", "sluchaj", "wykonuj", "odrzu",
              "nowe")),
    # Turkish puts the verb last; its verbs, not its nouns ("istem" is inside "system").
    (TURKISH, ("yok say", "yoksay", "görmezden", "gormezden", "unut", "dikkate", "önemseme", "onemseme",
               "atla", "boş ver", "boşver", "bos ver", "bosver", "uyma", "yeni")),
    (UKRAINIAN, ("ігнор", "забуд", "зважай", "відкинь", "виконуй", "слухай", "нові")),
    (SWEDISH, ("ignorera", "glöm", "glom", "bortse", "strunta", "nya")),
    (INDONESIAN, ("abaikan", "lupakan", "acuhkan", "jangan", "baru")),
    (CZECH, ("ignoruj", "zapome", "nevšímej", "nové")),
    (VIETNAMESE, ("bỏ qua", "phớt", "quên", "tuân")),
]  # fmt: skip

#: Each language's verbs of dismissal: as its patterns spell them, and as the reading of
#: words run together (``lore.safety.joined``: "ignoreallpreviousinstructions") looks for
#: them. A phrase led by one (``\b`` and the verb at a pattern's start; Turkish puts it last)
#: is also read so. The English verbs are read there without their misspellings: a misspelt
#: verb run together with its words is two disguises at once, and the misspellings would be
#: some sixty more substring tests of every passage.
DISMISSAL_VERBS: tuple[tuple[str, str], ...] = (
    (_DISMISS, "(?:" + _DISMISS_WORDS + ")"),
    *((verb, verb) for verb in (
        _NOT_FOLLOW, _FR_VERB, _DE_VERB, _ES_VERB, _PT_VERB, _IT_VERB, _RU_VERB, _NL_VERB, _PL_VERB, _TR_VERB,
        _UK_VERB, _SV_VERB, _ID_VERB, _CS_VERB, _VI_VERB,
    )),
)  # fmt: skip
