/// Reads the CloudKit Schema Language, as Apple's "Integrating a Text-Based Schema into Your
/// Workflow" gives it:
///
///     create-schema:  DEFINE SCHEMA [ { create-role | record-type } ";" ] ...
///     create-role:    CREATE ROLE %role-name%
///     record-type:    RECORD TYPE %type-name% (
///                       { [ %field-name% data-type [ field-options [..] ] ]
///                       | [ GRANT { READ | CREATE | WRITE } [, ... ] TO %role-name% ] } ["," ... ] )
///     field-options:  QUERYABLE | SORTABLE | SEARCHABLE
///     data-type:      primitive-type | LIST "<" primitive-type ">"
///     primitive-type: ASSET | BYTES | DOUBLE | INT64 | LOCATION | REFERENCE | STRING | TIMESTAMP
///                   | NUMBER [ PREFERRED AS { INT64 | DOUBLE } ]
///                   | ENCRYPTED { BYTES | STRING | DOUBLE | INT64 | LOCATION | TIMESTAMP }
///
/// Keywords are read in any case. Names start with a letter, then letters, digits and `_`; any
/// other name, and the reserved words (`grant`, `preferred`, `queryable`, `sortable`,
/// `searchable`), are written in double quotes. A record type or field defined twice is an error;
/// so is an option given twice.
struct SchemaReader {
    private var tokens: [SchemaToken]
    private var index = 0
    private var lexError: SchemaSyntaxError?

    static let reservedWords: Set<String> = ["GRANT", "PREFERRED", "QUERYABLE", "SORTABLE", "SEARCHABLE"]

    init(_ text: String) {
        var lexer = SchemaLexer(text)
        do {
            tokens = try lexer.tokens()
        } catch {
            tokens = []
            lexError = error
        }
    }

    private var current: SchemaToken { tokens[index] }
    private func next(_ offset: Int = 1) -> SchemaToken { tokens[min(index + offset, tokens.count - 1)] }
    private mutating func advance() { index = min(index + 1, tokens.count - 1) }

    mutating func readSchema() throws(SchemaSyntaxError) -> CloudKitSchema {
        if let lexError { throw lexError }
        try expectKeyword("DEFINE", "the file must begin with DEFINE SCHEMA")
        try expectKeyword("SCHEMA", "DEFINE must be followed by SCHEMA")
        var schema = CloudKitSchema()
        var typePositions: [String: SchemaPosition] = [:]
        var rolePositions: [String: SchemaPosition] = [:]
        while current.kind != .end {
            if current.isKeyword("CREATE") {
                let start = current.position
                advance()
                try expectKeyword("ROLE", "CREATE must be followed by ROLE")
                let (role, position) = try name(of: "a role")
                if let first = rolePositions[role] { throw SchemaSyntaxError("role \(role) is created twice (first at line \(first.line))", at: position) }
                rolePositions[role] = position
                schema.roles.append(role)
                try expectSemicolon(after: "CREATE ROLE \(role)", start: start)
            } else if current.isKeyword("RECORD") {
                let start = current.position
                let recordType = try readRecordType()
                if let first = typePositions[recordType.name] {
                    throw SchemaSyntaxError("record type \(recordType.name) is defined twice (first at line \(first.line))", at: recordType.position)
                }
                typePositions[recordType.name] = recordType.position
                schema.recordTypes.append(recordType)
                try expectSemicolon(after: "record type \(recordType.name)", start: start)
            } else {
                throw SchemaSyntaxError("expected RECORD TYPE or CREATE ROLE, found \(current.quoted)", at: current.position)
            }
        }
        return schema
    }

    // MARK: Record types

    private mutating func readRecordType() throws(SchemaSyntaxError) -> RecordTypeDefinition {
        advance()  // RECORD
        try expectKeyword("TYPE", "RECORD must be followed by TYPE")
        let (typeName, position) = try name(of: "a record type")
        var recordType = RecordTypeDefinition(name: typeName, position: position)
        guard current.isPunctuation("(") else {
            throw SchemaSyntaxError("expected '(' after the name of record type \(typeName), found \(current.quoted)", at: current.position)
        }
        advance()
        var fieldPositions: [String: SchemaPosition] = [:]
        if current.isPunctuation(")") {
            advance()
            return recordType
        }
        while true {
            if current.isKeyword("GRANT") {
                recordType.grants.append(try readGrant())
            } else {
                let field = try readField(in: typeName)
                if let first = fieldPositions[field.name] {
                    throw SchemaSyntaxError(
                        "field \(field.name) is defined twice in record type \(typeName) (first at line \(first.line))", at: field.position)
                }
                fieldPositions[field.name] = field.position
                if RecordTypeDefinition.isSystemField(field.name) {
                    recordType.systemFields.append(field)
                } else {
                    recordType.fields.append(field)
                }
            }
            if current.isPunctuation(",") {
                advance()
            } else if current.isPunctuation(")") {
                advance()
                return recordType
            } else {
                throw SchemaSyntaxError("expected ',' or ')' in record type \(typeName), found \(current.quoted)", at: current.position)
            }
        }
    }

    private mutating func readField(in typeName: String) throws(SchemaSyntaxError) -> FieldDefinition {
        let (fieldName, position) = try name(of: "a field (or GRANT)", in: "record type \(typeName)")
        let type = try readDataType(of: fieldName)
        var options: FieldOptions = []
        while case .name(let word, quoted: false) = current.kind {
            let option: FieldOptions
            switch word.uppercased() {
            case "QUERYABLE": option = .queryable
            case "SORTABLE": option = .sortable
            case "SEARCHABLE": option = .searchable
            default:
                if word.uppercased() == "GRANT" {
                    throw SchemaSyntaxError("expected ',' after field \(fieldName), before GRANT", at: current.position)
                }
                if case .name(let after, quoted: false) = next().kind,
                    FieldType.Primitive(rawValue: after.uppercased()) != nil || ["LIST", "ENCRYPTED"].contains(after.uppercased())
                {
                    throw SchemaSyntaxError("expected ',' after field \(fieldName), before field \(word)", at: current.position)
                }
                throw SchemaSyntaxError(
                    "unknown option '\(word)' for field \(fieldName) (expected QUERYABLE, SORTABLE or SEARCHABLE, or ',' before the next field)",
                    at: current.position)
            }
            if options.contains(option) { throw SchemaSyntaxError("option \(word.uppercased()) is given twice for field \(fieldName)", at: current.position) }
            options.insert(option)
            advance()
        }
        return FieldDefinition(name: fieldName, type: type, options: options, position: position)
    }

    private mutating func readDataType(of fieldName: String) throws(SchemaSyntaxError) -> FieldType {
        if current.isKeyword("LIST") {
            advance()
            guard current.isPunctuation("<") else {
                throw SchemaSyntaxError("expected '<' after LIST for field \(fieldName), found \(current.quoted)", at: current.position)
            }
            advance()
            var type = try readPrimitiveType(of: fieldName)
            guard current.isPunctuation(">") else {
                throw SchemaSyntaxError("expected '>' to close LIST<\(type)> of field \(fieldName), found \(current.quoted)", at: current.position)
            }
            advance()
            type.isList = true
            return type
        }
        return try readPrimitiveType(of: fieldName)
    }

    private mutating func readPrimitiveType(of fieldName: String) throws(SchemaSyntaxError) -> FieldType {
        var encrypted = false
        if current.isKeyword("ENCRYPTED") {
            encrypted = true
            advance()
        }
        let known = FieldType.Primitive.allCases.map(\.rawValue).joined(separator: ", ")
        guard case .name(let word, quoted: false) = current.kind, let primitive = FieldType.Primitive(rawValue: word.uppercased()) else {
            if current.isKeyword("LIST") {
                throw SchemaSyntaxError("field \(fieldName) has a LIST inside a LIST, which CloudKit has no type for", at: current.position)
            }
            let what = current.kind == .end || current.isPunctuation(",") || current.isPunctuation(")") ? "no type" : "unknown type \(current.quoted)"
            throw SchemaSyntaxError("field \(fieldName) has \(what) (expected one of \(known), or LIST<…>)", at: current.position)
        }
        if encrypted && !FieldType.Primitive.encryptable.contains(primitive) {
            let allowed = FieldType.Primitive.encryptable.map(\.rawValue).joined(separator: ", ")
            throw SchemaSyntaxError("ENCRYPTED \(primitive.rawValue) is not a type: only \(allowed) can be encrypted", at: current.position)
        }
        advance()
        var preferred: FieldType.Primitive?
        if primitive == .number && current.isKeyword("PREFERRED") {
            advance()
            try expectKeyword("AS", "PREFERRED must be followed by AS INT64 or AS DOUBLE")
            guard current.isKeyword("INT64") || current.isKeyword("DOUBLE"), case .name(let word, _) = current.kind else {
                throw SchemaSyntaxError("a NUMBER is preferred as INT64 or DOUBLE, not \(current.quoted)", at: current.position)
            }
            preferred = FieldType.Primitive(rawValue: word.uppercased())
            advance()
        }
        return FieldType(primitive, encrypted: encrypted, preferred: preferred)
    }

    /// `GRANT READ, CREATE TO role`: a comma followed by a privilege and then by `,` or `TO` is
    /// the privilege list's; any other comma ends the grant.
    private mutating func readGrant() throws(SchemaSyntaxError) -> Grant {
        advance()  // GRANT
        var privileges: [Grant.Privilege] = []
        while true {
            guard case .name(let word, quoted: false) = current.kind, let privilege = Grant.Privilege(rawValue: word.uppercased()) else {
                throw SchemaSyntaxError("expected READ, CREATE or WRITE after GRANT, found \(current.quoted)", at: current.position)
            }
            privileges.append(privilege)
            advance()
            let continues = next().kind
            if current.isPunctuation(","), case .name(let more, quoted: false) = continues, Grant.Privilege(rawValue: more.uppercased()) != nil,
                next(2).isPunctuation(",") || next(2).isKeyword("TO")
            {
                advance()
                continue
            }
            break
        }
        try expectKeyword("TO", "a grant names its role after TO")
        let (role, _) = try name(of: "a role")
        return Grant(privileges: privileges, role: role)
    }

    // MARK: Tokens

    /// A name (quoted or not); a reserved word must be quoted.
    private mutating func name(of what: String, in context: String? = nil) throws(SchemaSyntaxError) -> (String, SchemaPosition) {
        let token = current
        guard case .name(let text, let quoted) = token.kind else {
            throw SchemaSyntaxError("expected \(what) name\(context.map { " in \($0)" } ?? ""), found \(token.quoted)", at: token.position)
        }
        if !quoted && Self.reservedWords.contains(text.uppercased()) {
            throw SchemaSyntaxError("'\(text)' is a reserved word: write it in double quotes (\"\(text)\") to use it as a name", at: token.position)
        }
        advance()
        return (text, token.position)
    }

    private mutating func expectKeyword(_ keyword: String, _ sentence: String) throws(SchemaSyntaxError) {
        guard current.isKeyword(keyword) else { throw SchemaSyntaxError("\(sentence), found \(current.quoted)", at: current.position) }
        advance()
    }

    private mutating func expectSemicolon(after what: String, start: SchemaPosition) throws(SchemaSyntaxError) {
        guard current.isPunctuation(";") else {
            throw SchemaSyntaxError("expected ';' after \(what) (begun at line \(start.line)), found \(current.quoted)", at: current.position)
        }
        advance()
    }
}
