import RecordMapping

/// PostgreSQL names for CloudKit names, deterministic and without collisions.
///
/// CloudKit names are camelCase and unbounded; PostgreSQL names are at most 63 bytes (longer ones
/// are cut silently) and users query them folded to lower case. A name is the CloudKit name in
/// snake_case. When it would be longer than the limit, clash with a reserved name (the system
/// columns), or land on the same name as another one (`fooBar` and `foo_bar`), it gets a suffix:
/// `_` and 8 hex digits of a hash of the CloudKit name, after the snake_case name cut to fit.
/// Of names that land together, one keeps the plain name: the CloudKit name that already is its
/// snake_case (`foo_bar`), else the first in byte order. The same names in always give the same
/// names out.
public struct IdentifierNames: Sendable {
    public let maxBytes: Int
    /// Lower-case names nothing may take (the system columns, for columns).
    public let reserved: Set<String>
    /// Endings no name may have (`_live`, for tables: their views' names end so).
    public let reservedEndings: [String]

    public init(maxBytes: Int = 63, reserved: Set<String> = [], reservedEndings: [String] = []) {
        self.maxBytes = maxBytes
        self.reserved = reserved
        self.reservedEndings = reservedEndings
    }

    func isReserved(_ folded: String) -> Bool { reserved.contains(folded) || reservedEndings.contains { folded.hasSuffix($0) } }

    /// Names for `cloudKitNames` (whose plain forms are `plain`, the snake_case unless told)
    /// beside `taken` (names already given, by the user or earlier), and the renamed ones.
    public func names(
        for cloudKitNames: [String], taken: Set<String> = [], plain: (String) -> String = { $0.snakeCased }
    ) -> (names: [String: String], renamed: [RenamedName]) {
        var used = Set(taken.map { $0.lowercased() })
        var names: [String: String] = [:]
        // Who got each folded name, for the reason a later one is renamed: looked up, where a
        // search of `names` at each collision made a file of many colliding names quadratic.
        var owners: [String: String] = [:]
        var renamed: [RenamedName] = []
        // Who keeps a plain name that several want: the one already in snake_case, then byte order.
        // Each plain form made once, not at each comparison of the sort.
        let ordered = cloudKitNames.map { (name: $0, plain: plain($0)) }.sorted { a, b in
            if (a.plain == a.name) != (b.plain == b.name) { return a.plain == a.name }
            return a.name.utf8.lexicographicallyPrecedes(b.name.utf8)
        }
        for (cloudKitName, base) in ordered {
            let folded = base.lowercased()
            var reason: String?
            if base.utf8.count > maxBytes {
                reason = "longer than \(maxBytes) bytes"
            } else if isReserved(folded) {
                reason = "\(folded) is reserved"
            } else if used.contains(folded) {
                let owner = owners[folded]
                reason = owner.map { "\(folded) is taken by \($0)" } ?? "\(folded) is taken"
            }
            guard let reason else {
                names[cloudKitName] = base
                used.insert(folded)
                owners[folded] = cloudKitName
                continue
            }
            var salt = 0
            var name = suffixed(base, hashing: cloudKitName)
            while used.contains(name.lowercased()) || isReserved(name.lowercased()) {
                salt += 1
                name = suffixed(base, hashing: "\(cloudKitName)#\(salt)")
            }
            names[cloudKitName] = name
            used.insert(name.lowercased())
            owners[name.lowercased()] = cloudKitName
            renamed.append(RenamedName(cloudKitName: cloudKitName, name: name, reason: reason))
        }
        return (names, renamed.sorted { $0.cloudKitName < $1.cloudKitName })
    }

    /// `base` cut to leave room for `_` and 8 hex digits of `key`'s hash, then those.
    func suffixed(_ base: String, hashing key: String) -> String {
        let suffix = "_" + Self.hash(key)
        var cut = ""
        var bytes = 0
        // Counted as it goes: the length of the cut so far, asked at each character, made a long
        // name (a line of a schema file) quadratic.
        for character in base {
            let size = character.utf8.count
            guard bytes + size + suffix.utf8.count <= maxBytes else { break }
            cut.append(character)
            bytes += size
        }
        return cut + suffix
    }

    /// FNV-1a, 32 bits, as 8 hex digits: stable across processes and platforms (Swift's
    /// `Hasher` is seeded per process).
    static func hash(_ text: String) -> String {
        var h: UInt32 = 2_166_136_261
        for byte in text.utf8 {
            h ^= UInt32(byte)
            h = h &* 16_777_619
        }
        let hex = String(h, radix: 16)
        return String(repeating: "0", count: 8 - hex.count) + hex
    }
}
