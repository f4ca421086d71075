// Package country owns the ISO 3166-1 country codes the API accepts (alpha-2
// and numeric) and the English short name shown for each.
package country

import (
	"iter"
	"sort"
)

// Name returns the common English short name for an officially assigned
// upper-case alpha-2 code, e.g. "GB" -> "United Kingdom". Reserved codes such
// as "UK" or "EU" are not assigned and so are unknown.
func Name(code string) (string, bool) {
	if c, ok := find(code); ok {
		return c.name, true
	}
	return "", false
}

// Numeric returns the ISO 3166-1 numeric code of an officially assigned
// upper-case alpha-2 code, e.g. "GB" -> 826: the public API's countryId.
func Numeric(code string) (int, bool) {
	if c, ok := find(code); ok {
		return c.num, true
	}
	return 0, false
}

func find(code string) (entry, bool) {
	i := sort.Search(len(table), func(i int) bool { return table[i].code >= code })
	if i < len(table) && table[i].code == code {
		return table[i], true
	}
	return entry{}, false
}

// Valid reports whether code is an officially assigned alpha-2 code.
func Valid(code string) bool {
	_, ok := Name(code)
	return ok
}

// Country is one officially assigned code.
type Country struct {
	Code    string // alpha-2, e.g. "GB"
	Numeric int    // e.g. 826
	Name    string // English short name, e.g. "United Kingdom"
}

// All yields every country in alpha-2 code order.
func All() iter.Seq[Country] {
	return func(yield func(Country) bool) {
		for _, c := range table {
			if !yield(Country{Code: c.code, Numeric: c.num, Name: c.name}) {
				return
			}
		}
	}
}

type entry struct {
	code string
	num  int
	name string
}

// table is sorted by alpha-2 code for binary search; the test keeps it so.
// The numeric codes are ISO 3166-1's (as Debian's iso-codes lists them).
var table = [...]entry{
	{"AD", 20, "Andorra"},
	{"AE", 784, "United Arab Emirates"},
	{"AF", 4, "Afghanistan"},
	{"AG", 28, "Antigua and Barbuda"},
	{"AI", 660, "Anguilla"},
	{"AL", 8, "Albania"},
	{"AM", 51, "Armenia"},
	{"AO", 24, "Angola"},
	{"AQ", 10, "Antarctica"},
	{"AR", 32, "Argentina"},
	{"AS", 16, "American Samoa"},
	{"AT", 40, "Austria"},
	{"AU", 36, "Australia"},
	{"AW", 533, "Aruba"},
	{"AX", 248, "Åland Islands"},
	{"AZ", 31, "Azerbaijan"},
	{"BA", 70, "Bosnia and Herzegovina"},
	{"BB", 52, "Barbados"},
	{"BD", 50, "Bangladesh"},
	{"BE", 56, "Belgium"},
	{"BF", 854, "Burkina Faso"},
	{"BG", 100, "Bulgaria"},
	{"BH", 48, "Bahrain"},
	{"BI", 108, "Burundi"},
	{"BJ", 204, "Benin"},
	{"BL", 652, "Saint Barthélemy"},
	{"BM", 60, "Bermuda"},
	{"BN", 96, "Brunei"},
	{"BO", 68, "Bolivia"},
	{"BQ", 535, "Caribbean Netherlands"},
	{"BR", 76, "Brazil"},
	{"BS", 44, "Bahamas"},
	{"BT", 64, "Bhutan"},
	{"BV", 74, "Bouvet Island"},
	{"BW", 72, "Botswana"},
	{"BY", 112, "Belarus"},
	{"BZ", 84, "Belize"},
	{"CA", 124, "Canada"},
	{"CC", 166, "Cocos (Keeling) Islands"},
	{"CD", 180, "Democratic Republic of the Congo"},
	{"CF", 140, "Central African Republic"},
	{"CG", 178, "Republic of the Congo"},
	{"CH", 756, "Switzerland"},
	{"CI", 384, "Côte d'Ivoire"},
	{"CK", 184, "Cook Islands"},
	{"CL", 152, "Chile"},
	{"CM", 120, "Cameroon"},
	{"CN", 156, "China"},
	{"CO", 170, "Colombia"},
	{"CR", 188, "Costa Rica"},
	{"CU", 192, "Cuba"},
	{"CV", 132, "Cape Verde"},
	{"CW", 531, "Curaçao"},
	{"CX", 162, "Christmas Island"},
	{"CY", 196, "Cyprus"},
	{"CZ", 203, "Czechia"},
	{"DE", 276, "Germany"},
	{"DJ", 262, "Djibouti"},
	{"DK", 208, "Denmark"},
	{"DM", 212, "Dominica"},
	{"DO", 214, "Dominican Republic"},
	{"DZ", 12, "Algeria"},
	{"EC", 218, "Ecuador"},
	{"EE", 233, "Estonia"},
	{"EG", 818, "Egypt"},
	{"EH", 732, "Western Sahara"},
	{"ER", 232, "Eritrea"},
	{"ES", 724, "Spain"},
	{"ET", 231, "Ethiopia"},
	{"FI", 246, "Finland"},
	{"FJ", 242, "Fiji"},
	{"FK", 238, "Falkland Islands"},
	{"FM", 583, "Micronesia"},
	{"FO", 234, "Faroe Islands"},
	{"FR", 250, "France"},
	{"GA", 266, "Gabon"},
	{"GB", 826, "United Kingdom"},
	{"GD", 308, "Grenada"},
	{"GE", 268, "Georgia"},
	{"GF", 254, "French Guiana"},
	{"GG", 831, "Guernsey"},
	{"GH", 288, "Ghana"},
	{"GI", 292, "Gibraltar"},
	{"GL", 304, "Greenland"},
	{"GM", 270, "Gambia"},
	{"GN", 324, "Guinea"},
	{"GP", 312, "Guadeloupe"},
	{"GQ", 226, "Equatorial Guinea"},
	{"GR", 300, "Greece"},
	{"GS", 239, "South Georgia and the South Sandwich Islands"},
	{"GT", 320, "Guatemala"},
	{"GU", 316, "Guam"},
	{"GW", 624, "Guinea-Bissau"},
	{"GY", 328, "Guyana"},
	{"HK", 344, "Hong Kong"},
	{"HM", 334, "Heard Island and McDonald Islands"},
	{"HN", 340, "Honduras"},
	{"HR", 191, "Croatia"},
	{"HT", 332, "Haiti"},
	{"HU", 348, "Hungary"},
	{"ID", 360, "Indonesia"},
	{"IE", 372, "Ireland"},
	{"IL", 376, "Israel"},
	{"IM", 833, "Isle of Man"},
	{"IN", 356, "India"},
	{"IO", 86, "British Indian Ocean Territory"},
	{"IQ", 368, "Iraq"},
	{"IR", 364, "Iran"},
	{"IS", 352, "Iceland"},
	{"IT", 380, "Italy"},
	{"JE", 832, "Jersey"},
	{"JM", 388, "Jamaica"},
	{"JO", 400, "Jordan"},
	{"JP", 392, "Japan"},
	{"KE", 404, "Kenya"},
	{"KG", 417, "Kyrgyzstan"},
	{"KH", 116, "Cambodia"},
	{"KI", 296, "Kiribati"},
	{"KM", 174, "Comoros"},
	{"KN", 659, "Saint Kitts and Nevis"},
	{"KP", 408, "North Korea"},
	{"KR", 410, "South Korea"},
	{"KW", 414, "Kuwait"},
	{"KY", 136, "Cayman Islands"},
	{"KZ", 398, "Kazakhstan"},
	{"LA", 418, "Laos"},
	{"LB", 422, "Lebanon"},
	{"LC", 662, "Saint Lucia"},
	{"LI", 438, "Liechtenstein"},
	{"LK", 144, "Sri Lanka"},
	{"LR", 430, "Liberia"},
	{"LS", 426, "Lesotho"},
	{"LT", 440, "Lithuania"},
	{"LU", 442, "Luxembourg"},
	{"LV", 428, "Latvia"},
	{"LY", 434, "Libya"},
	{"MA", 504, "Morocco"},
	{"MC", 492, "Monaco"},
	{"MD", 498, "Moldova"},
	{"ME", 499, "Montenegro"},
	{"MF", 663, "Saint Martin"},
	{"MG", 450, "Madagascar"},
	{"MH", 584, "Marshall Islands"},
	{"MK", 807, "North Macedonia"},
	{"ML", 466, "Mali"},
	{"MM", 104, "Myanmar"},
	{"MN", 496, "Mongolia"},
	{"MO", 446, "Macao"},
	{"MP", 580, "Northern Mariana Islands"},
	{"MQ", 474, "Martinique"},
	{"MR", 478, "Mauritania"},
	{"MS", 500, "Montserrat"},
	{"MT", 470, "Malta"},
	{"MU", 480, "Mauritius"},
	{"MV", 462, "Maldives"},
	{"MW", 454, "Malawi"},
	{"MX", 484, "Mexico"},
	{"MY", 458, "Malaysia"},
	{"MZ", 508, "Mozambique"},
	{"NA", 516, "Namibia"},
	{"NC", 540, "New Caledonia"},
	{"NE", 562, "Niger"},
	{"NF", 574, "Norfolk Island"},
	{"NG", 566, "Nigeria"},
	{"NI", 558, "Nicaragua"},
	{"NL", 528, "Netherlands"},
	{"NO", 578, "Norway"},
	{"NP", 524, "Nepal"},
	{"NR", 520, "Nauru"},
	{"NU", 570, "Niue"},
	{"NZ", 554, "New Zealand"},
	{"OM", 512, "Oman"},
	{"PA", 591, "Panama"},
	{"PE", 604, "Peru"},
	{"PF", 258, "French Polynesia"},
	{"PG", 598, "Papua New Guinea"},
	{"PH", 608, "Philippines"},
	{"PK", 586, "Pakistan"},
	{"PL", 616, "Poland"},
	{"PM", 666, "Saint Pierre and Miquelon"},
	{"PN", 612, "Pitcairn Islands"},
	{"PR", 630, "Puerto Rico"},
	{"PS", 275, "Palestine"},
	{"PT", 620, "Portugal"},
	{"PW", 585, "Palau"},
	{"PY", 600, "Paraguay"},
	{"QA", 634, "Qatar"},
	{"RE", 638, "Réunion"},
	{"RO", 642, "Romania"},
	{"RS", 688, "Serbia"},
	{"RU", 643, "Russia"},
	{"RW", 646, "Rwanda"},
	{"SA", 682, "Saudi Arabia"},
	{"SB", 90, "Solomon Islands"},
	{"SC", 690, "Seychelles"},
	{"SD", 729, "Sudan"},
	{"SE", 752, "Sweden"},
	{"SG", 702, "Singapore"},
	{"SH", 654, "Saint Helena, Ascension and Tristan da Cunha"},
	{"SI", 705, "Slovenia"},
	{"SJ", 744, "Svalbard and Jan Mayen"},
	{"SK", 703, "Slovakia"},
	{"SL", 694, "Sierra Leone"},
	{"SM", 674, "San Marino"},
	{"SN", 686, "Senegal"},
	{"SO", 706, "Somalia"},
	{"SR", 740, "Suriname"},
	{"SS", 728, "South Sudan"},
	{"ST", 678, "São Tomé and Príncipe"},
	{"SV", 222, "El Salvador"},
	{"SX", 534, "Sint Maarten"},
	{"SY", 760, "Syria"},
	{"SZ", 748, "Eswatini"},
	{"TC", 796, "Turks and Caicos Islands"},
	{"TD", 148, "Chad"},
	{"TF", 260, "French Southern Territories"},
	{"TG", 768, "Togo"},
	{"TH", 764, "Thailand"},
	{"TJ", 762, "Tajikistan"},
	{"TK", 772, "Tokelau"},
	{"TL", 626, "Timor-Leste"},
	{"TM", 795, "Turkmenistan"},
	{"TN", 788, "Tunisia"},
	{"TO", 776, "Tonga"},
	{"TR", 792, "Türkiye"},
	{"TT", 780, "Trinidad and Tobago"},
	{"TV", 798, "Tuvalu"},
	{"TW", 158, "Taiwan"},
	{"TZ", 834, "Tanzania"},
	{"UA", 804, "Ukraine"},
	{"UG", 800, "Uganda"},
	{"UM", 581, "United States Minor Outlying Islands"},
	{"US", 840, "United States"},
	{"UY", 858, "Uruguay"},
	{"UZ", 860, "Uzbekistan"},
	{"VA", 336, "Vatican City"},
	{"VC", 670, "Saint Vincent and the Grenadines"},
	{"VE", 862, "Venezuela"},
	{"VG", 92, "British Virgin Islands"},
	{"VI", 850, "U.S. Virgin Islands"},
	{"VN", 704, "Vietnam"},
	{"VU", 548, "Vanuatu"},
	{"WF", 876, "Wallis and Futuna"},
	{"WS", 882, "Samoa"},
	{"YE", 887, "Yemen"},
	{"YT", 175, "Mayotte"},
	{"ZA", 710, "South Africa"},
	{"ZM", 894, "Zambia"},
	{"ZW", 716, "Zimbabwe"},
}
