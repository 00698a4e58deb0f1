/// Who the web auth token belongs to (`users/caller`).
public struct UserIdentity: Sendable, Hashable {
    public var userRecordName: String
    public var givenName: String?
    public var familyName: String?
    public var emailAddress: String?

    public init(userRecordName: String, givenName: String? = nil, familyName: String? = nil, emailAddress: String? = nil) {
        self.userRecordName = userRecordName
        self.givenName = givenName
        self.familyName = familyName
        self.emailAddress = emailAddress
    }
}

extension UserIdentity: Decodable {
    enum CodingKeys: String, CodingKey { case userRecordName, nameComponents, lookupInfo, firstName, lastName }
    enum NameKeys: String, CodingKey { case givenName, familyName }
    enum LookupKeys: String, CodingKey { case emailAddress }

    /// A `userIdentity` dictionary, or the older `users/current` form with `firstName`/`lastName`.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        userRecordName = try c.decode(String.self, forKey: .userRecordName)
        if c.contains(.nameComponents), try !c.decodeNil(forKey: .nameComponents) {
            let names = try c.nestedContainer(keyedBy: NameKeys.self, forKey: .nameComponents)
            givenName = try names.decodeIfPresent(String.self, forKey: .givenName)
            familyName = try names.decodeIfPresent(String.self, forKey: .familyName)
        } else {
            givenName = try c.decodeIfPresent(String.self, forKey: .firstName)
            familyName = try c.decodeIfPresent(String.self, forKey: .lastName)
        }
        if c.contains(.lookupInfo), try !c.decodeNil(forKey: .lookupInfo) {
            emailAddress = try c.nestedContainer(keyedBy: LookupKeys.self, forKey: .lookupInfo)
                .decodeIfPresent(String.self, forKey: .emailAddress)
        }
    }
}

/// `{users: [userIdentity]}` per the reference, or a flat `userIdentity`.
struct CallerResponse: Decodable {
    var user: UserIdentity

    enum CodingKeys: String, CodingKey { case users }

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        if c.contains(.users) {
            let users = try c.decode([UserIdentity].self, forKey: .users)
            guard let first = users.first else {
                throw DecodingError.dataCorrupted(.init(codingPath: [CodingKeys.users], debugDescription: "users is empty"))
            }
            user = first
        } else {
            user = try UserIdentity(from: decoder)
        }
    }
}
