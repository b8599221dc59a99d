/*
 * lookup.c - whether the MPI calls the plugin defines are the ones the
 * process calls.
 *
 * The plugin interposes by symbol lookup order: preloaded, its MPI_Send
 * comes before the MPI library's.  A tool preloaded before it (a profiler
 * that wraps some calls and passes them to PMPI_X), or a program that
 * exports its own MPI_X, comes before the plugin in turn, and its MPI_X
 * reaches the MPI library without passing through the plugin.  Should the
 * plugin carry the messages of its other calls, a receive of its own would
 * then wait for a message sent through the library, for ever.  So at
 * MPI_Init the plugin looks up, by name, every MPI call it exports and
 * carries nothing where one of them resolves elsewhere.
 *
 * The names come from the plugin's own dynamic symbol table (the dynamic
 * section of its link map: .dynsym, its string table, and the GNU or SysV
 * hash table, whose chains give the number of symbols).
 */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

#include "plugin.h"

/* The address of a dynamic-section entry: glibc relocates most entries in
 * place, other loaders leave them relative to the object's base. */
static const void *dyn_addr(const struct link_map *map, ElfW(Addr) v)
{
	return (const void *)(v < map->l_addr ? v + map->l_addr : v);
}

/* The number of symbols in .dynsym, from its hash table. */
static size_t count_symbols(const uint32_t *gnu_hash, const uint32_t *sysv_hash)
{
	if (sysv_hash)
		return sysv_hash[1]; /* nchain: one entry a symbol */
	if (!gnu_hash)
		return 0;
	/* GNU: nbuckets, symoffset, bloom words, bloom shift; the bloom
	 * filter; the buckets (each its chain's first symbol); the chains
	 * (one hash a symbol from symoffset on, the last of a chain odd). */
	uint32_t nbuckets = gnu_hash[0], symoffset = gnu_hash[1], bloom_words = gnu_hash[2];
	const uint32_t *buckets = (const uint32_t *)((const ElfW(Addr) *)(gnu_hash + 4) + bloom_words);
	const uint32_t *chains = buckets + nbuckets;
	uint32_t last = 0;
	for (uint32_t i = 0; i < nbuckets; i++)
		if (buckets[i] > last)
			last = buckets[i];
	if (last < symoffset)
		return symoffset;
	while (!(chains[last - symoffset] & 1))
		last++;
	return (size_t)last + 1;
}

static bool is_mpi_name(const char *name)
{
	return !strncmp(name, "MPI_", 4) || !strncmp(name, "mpi_", 4) || !strncmp(name, "ompi_", 5);
}

bool pm_calls_taken(char *why, size_t len)
{
	struct link_map *map = NULL;
	Dl_info self;
	if (!dladdr1((void *)pm_calls_taken, &self, (void **)&map, RTLD_DL_LINKMAP) || !map)
		return false;

	const ElfW(Sym) *symtab = NULL;
	const char *strtab = NULL;
	const uint32_t *gnu_hash = NULL, *sysv_hash = NULL;
	size_t strsz = 0;
	for (const ElfW(Dyn) *d = map->l_ld; d->d_tag != DT_NULL; d++) {
		switch (d->d_tag) {
		case DT_SYMTAB:
			symtab = dyn_addr(map, d->d_un.d_ptr);
			break;
		case DT_STRTAB:
			strtab = dyn_addr(map, d->d_un.d_ptr);
			break;
		case DT_STRSZ:
			strsz = d->d_un.d_val;
			break;
		case DT_GNU_HASH:
			gnu_hash = dyn_addr(map, d->d_un.d_ptr);
			break;
		case DT_HASH:
			sysv_hash = dyn_addr(map, d->d_un.d_ptr);
			break;
		}
	}
	if (!symtab || !strtab)
		return false;

	size_t n = count_symbols(gnu_hash, sysv_hash), taken = 0;
	const char *first = NULL;
	Dl_info other = {0};
	for (size_t i = 0; i < n; i++) {
		const ElfW(Sym) *s = &symtab[i]; /* ELF64_ST_TYPE is ELF32_ST_TYPE */
		if (s->st_shndx == SHN_UNDEF || ELF64_ST_TYPE(s->st_info) != STT_FUNC || s->st_name >= strsz)
			continue;
		const char *name = strtab + s->st_name;
		if (!is_mpi_name(name))
			continue;
		void *found = dlsym(RTLD_DEFAULT, name);
		if (!found || found == (void *)(map->l_addr + s->st_value))
			continue;
		if (taken++ == 0) {
			first = name;
			if (!dladdr(found, &other))
				other.dli_fname = NULL;
		}
	}
	if (!taken)
		return false;
	const char *where = other.dli_fname && other.dli_fname[0] ? other.dli_fname : "the program";
	if (taken == 1)
		snprintf(why, len, "%s is defined by %s, which comes before the plugin", first, where);
	else
		snprintf(why, len, "%s and %zu more of the plugin's calls are defined by %s (or others), which come "
			 "before the plugin", first, taken - 1, where);
	return true;
}
